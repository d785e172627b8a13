package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/heraldhq/herald/sdk"
)

// Version is the plugin's own version; make stamps it from git with -ldflags "-X main.Version=...".
var Version = "0.2.0"

// MaxBatch is the largest batch one Send accepts.
const MaxBatch = 500

// Outcome reasons and Permanent codes of the WEBSOCKET channel.
const (
	// CodeOffline: no daemon holds an open session of the recipient (the
	// broker returned the message). Not a failure: the result is
	// sdk.Skipped with this reason, the delivery ends SKIPPED and is not
	// retried; the inbox keeps the notification.
	CodeOffline = "offline"
	// CodeNoAddress: the delivery names no user.
	CodeNoAddress = "no_address"
)

// FrameNotification is the type of the frame a browser receives.
const FrameNotification = "notification"

// ErrNotConfigured prompts the host to call Configure before Send or Health.
var ErrNotConfigured = errors.New("websocket: not configured")

// WebSocket is the WEBSOCKET channel. It serves no browser itself: every
// `herald serve` runs a live gateway (/v1/live) that holds its browsers'
// sessions and binds their users' route keys on the live exchange. The
// plugin publishes each delivery there with mandatory set and confirms
// on: the broker routes it to every daemon holding a session of the user,
// or returns it when none does (the user is offline). Nothing binds a
// port, so a hot swap of the plugin leaves every session open.
type WebSocket struct {
	mu   sync.Mutex // serializes Send, Health and Configure
	cfg  *Config
	conn *amqp.Connection
	ch   *amqp.Channel
	rets chan amqp.Return
	// next is the index of the broker URL to dial first: the one after
	// the node of the last connection, so that a node that went away is
	// tried last.
	next int
}

var (
	_ sdk.Channel = (*WebSocket)(nil)
	_ sdk.Closer  = (*WebSocket)(nil)
)

// New returns an unconfigured websocket channel; Serve calls it once.
func New() sdk.Channel { return &WebSocket{} }

// Describe returns the plugin's static description.
func (w *WebSocket) Describe(ctx context.Context, _ sdk.DescribeRequest) (sdk.DescribeResponse, error) {
	return sdk.DescribeResponse{Description: sdk.Description{
		ChannelType:   "WEBSOCKET",
		Provider:      "websocket",
		PluginVersion: Version,
		Class:         sdk.BestEffort,
		MaxBatch:      MaxBatch,
		Config:        configSpecs,
	}}, nil
}

// Configure checks the config; the broker is dialled on first use.
func (w *WebSocket) Configure(ctx context.Context, req sdk.ConfigureRequest) (sdk.ConfigureResponse, error) {
	cfg, err := configFromParsed(req.Config)
	if err != nil {
		return sdk.ConfigureResponse{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disconnect()
	w.cfg = &cfg
	return sdk.ConfigureResponse{}, nil
}

// Close closes the broker connection (sdk.Closer).
func (w *WebSocket) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disconnect()
	return nil
}

func (w *WebSocket) disconnect() {
	if w.conn != nil {
		_ = w.conn.Close()
	}
	w.conn, w.ch, w.rets = nil, nil, nil
}

// channel returns a confirm-mode channel with returns, dialling when there
// is none or it closed. w.mu is held.
func (w *WebSocket) channel() (*amqp.Channel, error) {
	if w.cfg == nil {
		return nil, ErrNotConfigured
	}
	if w.ch != nil && !w.ch.IsClosed() {
		return w.ch, nil
	}
	w.disconnect()
	urls := w.cfg.URLs()
	var conn *amqp.Connection
	var errs []error
	for i := range urls {
		k := (w.next + i) % len(urls)
		c, err := amqp.DialConfig(urls[k], amqp.Config{Heartbeat: 10 * time.Second,
			Properties: amqp.Table{"connection_name": "herald-plugin-websocket"}})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conn, w.next = c, (k+1)%len(urls)
		break
	}
	if conn == nil {
		return nil, fmt.Errorf("websocket: dial broker: %w", errors.Join(errs...))
	}
	ch, err := conn.Channel()
	if err == nil {
		err = liveproto.DeclareExchange(ch, w.cfg.Exchange)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("websocket: open channel: %w", err)
	}
	// A return comes before the confirm of its message; the buffer holds a
	// whole batch's, so the connection's reader never blocks on it.
	w.conn, w.ch, w.rets = conn, ch, ch.NotifyReturn(make(chan amqp.Return, MaxBatch+1))
	return ch, nil
}

// Health reports whether the broker takes messages.
func (w *WebSocket) Health(ctx context.Context, _ sdk.HealthRequest) (sdk.HealthResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.channel(); err != nil {
		return sdk.HealthResponse{Healthy: false, Message: err.Error()}, nil
	}
	return sdk.HealthResponse{Healthy: true, Message: "publishing to exchange " + w.cfg.Exchange}, nil
}

// Send publishes each delivery to its user's route key and reports Sent
// when the broker routed it to at least one daemon, offline when it came
// back unroutable.
func (w *WebSocket) Send(ctx context.Context, req sdk.SendRequest) (sdk.SendResponse, error) {
	batch := req.Deliveries
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, err := w.channel()
	if err != nil {
		return sdk.SendResponse{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.PublishTimeout)
	defer cancel()
	results := make([]sdk.Result, len(batch))
	confirms := make([]*amqp.DeferredConfirmation, len(batch))
	for i, d := range batch {
		if d.Recipient.UserID == "" {
			results[i] = sdk.Permanent(d.DeliveryID, "websocket: delivery names no user", CodeNoAddress)
			continue
		}
		frame, err := notificationFrame(d)
		if err != nil {
			results[i] = sdk.Permanent(d.DeliveryID, "websocket: encode frame: "+err.Error(), "encode")
			continue
		}
		msg := liveproto.Message(d.TenantID, d.Recipient.UserID, frame)
		msg.MessageId = d.DeliveryID
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, w.cfg.Exchange,
			liveproto.RouteKey(d.TenantID, d.Recipient.UserID), true, false, msg)
		if err != nil {
			w.disconnect()
			return sdk.SendResponse{}, fmt.Errorf("websocket: publish: %w", err)
		}
	}
	acked := make([]bool, len(batch))
	for i, c := range confirms {
		if c == nil {
			continue
		}
		ok, err := c.WaitContext(ctx)
		if err != nil {
			w.disconnect()
			return sdk.SendResponse{}, fmt.Errorf("websocket: confirm: %w", err)
		}
		acked[i] = ok
	}
	returned := map[string]bool{}
drain:
	for {
		select {
		case r := <-w.rets:
			returned[r.MessageId] = true
		default:
			break drain
		}
	}
	for i, d := range batch {
		switch {
		case confirms[i] == nil:
		case returned[d.DeliveryID]:
			results[i] = sdk.Skipped(d.DeliveryID, CodeOffline)
		case !acked[i]:
			results[i] = sdk.Retry(d.DeliveryID, "websocket: the broker refused the message", 0)
		default:
			results[i] = sdk.Sent(d.DeliveryID, "routed")
		}
	}
	return sdk.SendResponse{Results: results}, nil
}

// frame is the JSON a browser receives.
type frame struct {
	Type           string          `json:"type"`
	DeliveryID     string          `json:"delivery_id,omitempty"`
	NotificationID string          `json:"notification_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	EventType      string          `json:"event_type,omitempty"`
	Title          string          `json:"title,omitempty"`
	Body           string          `json:"body,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Severity       string          `json:"severity,omitempty"`
}

// notificationFrame encodes a delivery. The idempotency key lets a browser
// drop a notification it has already shown.
func notificationFrame(d sdk.Delivery) ([]byte, error) {
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	data := d.Content.Data
	if len(data) > 0 && !json.Valid(data) {
		return nil, errors.New("content data is not valid JSON")
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	return json.Marshal(frame{
		Type:           FrameNotification,
		DeliveryID:     d.DeliveryID,
		NotificationID: d.NotificationID,
		IdempotencyKey: key,
		EventType:      d.EventType,
		Title:          title,
		Body:           d.Content.Body,
		Data:           data,
		Severity:       d.Severity,
	})
}
