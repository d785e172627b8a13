//go:build chaos

package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The kernels this suite runs on may lack sch_netem (the Firecracker
// kernel of the project's machines is built without CONFIG_NET_SCH_NETEM),
// so a delay is made with netfilter instead: iptables sends the packets to
// an NFQUEUE queue, and delayer, bound to that queue over netlink, gives
// each packet its ACCEPT verdict only after the delay. The packets wait in
// the kernel, in order, as they would in netem's queue.

// nfqueue's netlink constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue    = 3
	nfqnlMsgPacket     = 0
	nfqnlMsgVerdict    = 1
	nfqnlMsgConfig     = 2
	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqaCfgMask        = 4
	nfqaCfgFlags       = 5
	nfqaCfgFFailOpen   = 1
	nfqnlCfgCmdBind    = 1
	nfqnlCopyMeta      = 1
	nfqaPacketHdr      = 1
	nfqaVerdictHdr     = 2
	nfAccept           = 1
)

// delayer holds every packet of one NFQUEUE queue for a fixed delay.
type delayer struct {
	ns      string
	conn    *netlink.Conn
	queue   uint16
	delay   time.Duration
	pending sync.WaitGroup
	count   atomic.Int64
	done    chan struct{}
	mu      sync.Mutex
	closing bool
	err     error
}

// delayStats is what a delayer did.
type delayStats struct {
	// delayed is how many packets it held.
	delayed int64
	// overflow is the kernel's queue line (/proc/net/netfilter/
	// nfnetlink_queue): queue_dropped and user_dropped say how many
	// packets did not fit (with fail-open they pass undelayed).
	overflow string
	err      error
}

// startDelayer binds NFQUEUE queue in network namespace ns.
func startDelayer(ns string, queue uint16, delay time.Duration) (*delayer, error) {
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return nil, fmt.Errorf("netlink dial in %s: %w", ns, err)
	}
	_ = c.SetReadBuffer(8 << 20)
	_ = c.SetOption(netlink.NoENOBUFS, true)
	d := &delayer{ns: ns, conn: c, queue: queue, delay: delay, done: make(chan struct{})}
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	for _, attrs := range [][]netlink.Attribute{
		{{Type: nfqaCfgCmd, Data: []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}}},
		{
			{Type: nfqaCfgParams, Data: append(be32(0), nfqnlCopyMeta)},
			{Type: nfqaCfgQueueMaxlen, Data: be32(16384)},
			{Type: nfqaCfgMask, Data: be32(nfqaCfgFFailOpen)},
			{Type: nfqaCfgFlags, Data: be32(nfqaCfgFFailOpen)},
		},
	} {
		m, err := d.message(nfqnlMsgConfig, attrs)
		if err == nil {
			m.Header.Flags |= netlink.Acknowledge
			_, err = c.Execute(m)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("configure NFQUEUE %d in %s: %w", queue, ns, err)
		}
	}
	go d.loop()
	return d, nil
}

// message is an nfqueue netlink request for d's queue.
func (d *delayer) message(typ uint16, attrs []netlink.Attribute) (netlink.Message, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	hdr := []byte{unix.AF_UNSPEC, 0, byte(d.queue >> 8), byte(d.queue)}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | typ), Flags: netlink.Request},
		Data:   append(hdr, b...),
	}, nil
}

func (d *delayer) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.err = err
	}
}

// loop reads queued packets and schedules each one's verdict.
func (d *delayer) loop() {
	defer close(d.done)
	for {
		msgs, err := d.conn.Receive()
		if err != nil {
			select {
			case <-d.stopped():
			default:
				if !errors.Is(err, unix.ENOBUFS) {
					d.fail(fmt.Errorf("receive: %w", err))
				}
			}
			if errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return
		}
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(nfnlSubsysQueue<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				d.fail(err)
				continue
			}
			var id uint32
			found := false
			for ad.Next() {
				if ad.Type() == nfqaPacketHdr && len(ad.Bytes()) >= 4 {
					id, found = binary.BigEndian.Uint32(ad.Bytes()[:4]), true
				}
			}
			if !found {
				continue
			}
			d.count.Add(1)
			d.pending.Add(1)
			time.AfterFunc(d.delay, func() {
				defer d.pending.Done()
				d.verdict(id)
			})
		}
	}
}

var stopClosed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// stopped is closed once stop is about to close the socket.
func (d *delayer) stopped() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return stopClosed
	}
	return nil
}

func (d *delayer) verdict(id uint32) {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	m, err := d.message(nfqnlMsgVerdict, []netlink.Attribute{{Type: nfqaVerdictHdr, Data: v}})
	if err == nil {
		_, err = d.conn.Send(m)
	}
	if err != nil {
		d.fail(fmt.Errorf("verdict for packet %d: %w", id, err))
	}
}

// stop waits for the verdicts of every held packet (the iptables rules
// must be gone already, so no new packet arrives), then unbinds.
func (d *delayer) stop() delayStats {
	// Packets queued before the rules went may still be on their way to
	// the socket: wait until a whole delay passes with no new one, so
	// that unbinding (which drops what is still queued) drops nothing.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		c := d.count.Load()
		time.Sleep(d.delay + 100*time.Millisecond)
		if d.count.Load() == c {
			break
		}
	}
	wait := make(chan struct{})
	go func() { d.pending.Wait(); close(wait) }()
	select {
	case <-wait:
	case <-time.After(d.delay + 10*time.Second):
		d.fail(errors.New("held packets still without a verdict 10s after their delay"))
	}
	st := delayStats{delayed: d.count.Load()}
	if out, err := exec.Command("ip", "netns", "exec", d.ns, "cat", "/proc/net/netfilter/nfnetlink_queue").CombinedOutput(); err == nil {
		st.overflow = strings.TrimSpace(string(out))
		// queue_number portid queue_total copy_mode copy_range
		// queue_dropped user_dropped id_sequence 1
		if f := strings.Fields(st.overflow); len(f) >= 7 && (f[5] != "0" || f[6] != "0") {
			d.fail(fmt.Errorf("the kernel dropped queued packets (queue_dropped %s, user_dropped %s): the delay fault also lost packets", f[5], f[6]))
		}
	}
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	d.conn.Close()
	<-d.done
	d.mu.Lock()
	st.err = d.err
	d.mu.Unlock()
	return st
}
