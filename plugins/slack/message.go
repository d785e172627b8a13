package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/sdk"
)

// Keys of a delivery's template data (Content.Data, a JSON object) that the
// plugin reads.
const (
	// DataBlocks holds Block Kit blocks: a JSON array, or a string holding
	// one (what a template's data = { blocks = "..." } renders).
	DataBlocks = "blocks"
	// DataWebhook names the webhook a delivery goes to in webhook mode.
	DataWebhook = "webhook"
)

// MaxBlocks is the most blocks Slack accepts in one message.
const MaxBlocks = 50

// Permanent codes for messages the plugin cannot build.
const (
	// CodeInvalidBlocks: the template's blocks are not a JSON array of
	// Block Kit blocks (or more than MaxBlocks).
	CodeInvalidBlocks = "invalid_blocks"
	// CodeNoText: the delivery has no title, body or blocks.
	CodeNoText = "no_text"
)

// message is a delivery rendered for Slack, shared by chat.postMessage and
// incoming webhooks: the title in bold over the body as text (the fallback
// of notifications when blocks are given), the template's Block Kit
// blocks, and Herald's ids as message metadata.
type message struct {
	text     string
	blocks   []slack.Block
	metadata slack.SlackMetadata
	// webhook is the template's data.webhook, when set.
	webhook string
}

// messageError is a delivery that cannot become a Slack message; code is
// its Permanent code.
type messageError struct {
	code string
	msg  string
}

func (e *messageError) Error() string { return "slack: " + e.msg }

// renderMessage builds the Slack message of a delivery.
func renderMessage(d sdk.Delivery) (message, error) {
	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	text := d.Content.Body
	if title != "" {
		text = "*" + title + "*\n" + text
	}
	m := message{text: strings.TrimSpace(text)}
	data, err := templateData(d.Content.Data)
	if err != nil {
		return message{}, err
	}
	if raw, ok := data[DataBlocks]; ok {
		if m.blocks, err = parseBlocks(raw); err != nil {
			return message{}, err
		}
	}
	if raw, ok := data[DataWebhook]; ok {
		var name string
		if json.Unmarshal(raw, &name) != nil {
			return message{}, &messageError{code: CodeUnknownWebhook, msg: "template data webhook must be a string (a name in webhooks)"}
		}
		m.webhook = strings.TrimSpace(name)
	}
	if m.text == "" && len(m.blocks) == 0 {
		return message{}, &messageError{code: CodeNoText, msg: "the template gives no title, body or blocks"}
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.DeliveryID
	}
	payload := map[string]any{
		"idempotency_key": key,
		"delivery_id":     d.DeliveryID,
	}
	if d.NotificationID != "" {
		payload["notification_id"] = d.NotificationID
	}
	if d.EventType != "" {
		payload["event_type"] = d.EventType
	}
	m.metadata = slack.SlackMetadata{EventType: MetadataEventType, EventPayload: payload}
	return m, nil
}

// templateData reads Content.Data as a JSON object; data that is not an
// object (or none) carries no keys the plugin reads.
func templateData(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, nil
	}
	return obj, nil
}

// parseBlocks reads Block Kit blocks through slack-go's Blocks (block types
// slack-go does not know travel as written): a JSON array, or a string
// holding one.
func parseBlocks(raw json.RawMessage) ([]slack.Block, error) {
	src := bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(src, &s) == nil {
		src = bytes.TrimSpace([]byte(s))
		if len(src) == 0 {
			return nil, nil
		}
	}
	bad := func(format string, args ...any) error {
		return &messageError{code: CodeInvalidBlocks, msg: "template data blocks: " + fmt.Sprintf(format, args...)}
	}
	if len(src) == 0 || src[0] != '[' {
		return nil, bad("want a JSON array of Block Kit blocks")
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(src, &items); err != nil {
		return nil, bad("not a JSON array of objects: %v", err)
	}
	if len(items) > MaxBlocks {
		return nil, bad("%d blocks; Slack takes at most %d", len(items), MaxBlocks)
	}
	for i, it := range items {
		var typ string
		if json.Unmarshal(it["type"], &typ) != nil || typ == "" {
			return nil, bad("block %d has no type", i)
		}
	}
	var blocks slack.Blocks
	if err := json.Unmarshal(src, &blocks); err != nil {
		return nil, bad("%v", err)
	}
	return blocks.BlockSet, nil
}
