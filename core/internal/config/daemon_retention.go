package config

import (
	"cmp"
	"sort"
	"time"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// RetentionConfig is how long Herald keeps its rows. The daemon drops a
// monthly partition of a partitioned table once every row in it is older
// than its table's retention (detach and drop, never a DELETE). What a
// whole partition cannot give (events, archived notifications, a tenant's
// shorter periods: a partition holds every tenant's rows of its month) it
// deletes in short bounded batches (store.ApplySweeps). `herald retention
// status` shows what will go when.
type RetentionConfig struct {
	// DeliveryAttempts keeps the attempt log (delivery_attempts) for this
	// long after its delivery was created, e.g. "720h" (30 days): a monthly
	// partition is dropped whole once every row in it is older. 0 keeps it
	// forever. At least 24h.
	DeliveryAttempts time.Duration `koanf:"delivery_attempts"`
	// Notifications keeps inbox rows for this long after their event was
	// created, e.g. "8760h" (a year): a monthly partition is dropped whole
	// once every row in it is older, and its unread rows leave the unread
	// counters in the same transaction. 0 keeps them forever. At least
	// 24h.
	Notifications time.Duration `koanf:"notifications"`
	// Deliveries keeps delivery rows (the biggest table: the rendered
	// content of every delivery, about 1.1 KiB a row in the soak tests)
	// for this long after their event was created, e.g. "2160h" (90 days):
	// a monthly partition is dropped whole once every row in it is older.
	// A delivery not final yet (PENDING, PUBLISHED, SENDING, RETRY or
	// DEFERRED: still owed to its user) is moved to the default partition
	// in the same transaction and kept until it is SENT or FAILED. 0 keeps
	// them forever. At least 24h.
	Deliveries time.Duration `koanf:"deliveries"`
	// Events keeps PROCESSED and FAILED events (event_outbox, not
	// partitioned) for this long after they were enqueued, e.g. "720h";
	// older ones are deleted in short bounded batches by the daemon's
	// hourly pass (store.ApplySweeps). PENDING events are never deleted.
	// It is the producers' idempotency window: an event_id enqueued again
	// after its event was deleted is a new event. 0 keeps them forever. At
	// least 24h.
	Events time.Duration `koanf:"events"`
	// ArchivedNotifications keeps archived notifications for this long
	// after they were archived, e.g. "720h"; older ones are deleted in
	// short bounded batches by the daemon's hourly pass. At most
	// notifications when both are set. 0: as long as the other
	// notifications. At least 24h.
	ArchivedNotifications time.Duration `koanf:"archived_notifications"`
	// Tenants holds tenants' own periods (`tenant "acme" { ... }`
	// blocks), keyed by tenant id: events, notifications,
	// archived_notifications and delivery_attempts (deliveries has none).
	// Each is at least 24h and, when the global period of its key is set,
	// may only shorten it (a monthly partition holds every tenant's rows
	// and goes at the global period): a longer one is refused naming its
	// key, e.g. retention.tenant.acme.notifications. A tenant's archived_notifications
	// is at most its notifications period (its own or the global one). 0,
	// or a key left out, keeps the global period. The tenant's rows past
	// its periods are deleted in short bounded batches by the daemon's
	// hourly pass, its unread notifications leaving the unread counters in
	// the same statement.
	Tenants map[string]TenantRetentionConfig `koanf:"tenant"`
}

// TenantRetentionConfig is one tenant's own retention periods, set by a
// `tenant "ID" { ... }` block in retention. Each may only shorten the
// global period of its key (a partition holds every tenant's rows, so the
// global period is what drops months; a tenant's shorter one deletes that
// tenant's older rows in bounded batches). 0 keeps the global period.
type TenantRetentionConfig struct {
	// Events is the tenant's retention.events.
	Events time.Duration `koanf:"events"`
	// Notifications is the tenant's retention.notifications.
	Notifications time.Duration `koanf:"notifications"`
	// ArchivedNotifications is the tenant's
	// retention.archived_notifications.
	ArchivedNotifications time.Duration `koanf:"archived_notifications"`
	// DeliveryAttempts is the tenant's retention.delivery_attempts.
	DeliveryAttempts time.Duration `koanf:"delivery_attempts"`
}

// Validate checks the periods and the tenants' blocks; it returns
// field.Errors naming the keys.
func (r RetentionConfig) Validate() error {
	var errs field.Errors
	period := func(key string, v time.Duration) {
		if v != 0 && v < 24*time.Hour {
			errs.Add(key, "must be 0 (keep forever) or at least 24h, got %s", v)
		}
	}
	period("delivery_attempts", r.DeliveryAttempts)
	period("notifications", r.Notifications)
	period("deliveries", r.Deliveries)
	period("events", r.Events)
	period("archived_notifications", r.ArchivedNotifications)
	if r.ArchivedNotifications > 0 && r.Notifications > 0 && r.ArchivedNotifications > r.Notifications {
		errs.Add("archived_notifications", "%s is longer than retention.notifications (%s): archived notifications may only go sooner",
			r.ArchivedNotifications, r.Notifications)
	}
	tenants := make([]string, 0, len(r.Tenants))
	for t := range r.Tenants {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		tr := r.Tenants[t]
		prefix := "tenant." + t + "."
		if t == "" {
			errs.Add("tenant", "a tenant block needs the tenant id as its label")
			continue
		}
		for _, k := range []struct {
			key         string
			own, global time.Duration
		}{
			{"events", tr.Events, r.Events},
			{"notifications", tr.Notifications, r.Notifications},
			{"archived_notifications", tr.ArchivedNotifications, r.ArchivedNotifications},
			{"delivery_attempts", tr.DeliveryAttempts, r.DeliveryAttempts},
		} {
			period(prefix+k.key, k.own)
			if k.own > 0 && k.global > 0 && k.own > k.global {
				errs.Add(prefix+k.key, "%s is longer than retention.%s (%s): a tenant's period may only shorten the global one "+
					"(a monthly partition holds every tenant's rows and goes at the global period)", k.own, k.key, k.global)
			}
		}
		notes := cmp.Or(tr.Notifications, r.Notifications)
		if tr.ArchivedNotifications > 0 && notes > 0 && tr.ArchivedNotifications > notes {
			errs.Add(prefix+"archived_notifications", "%s is longer than the tenant's notifications period (%s): archived notifications may only go sooner",
				tr.ArchivedNotifications, notes)
		}
	}
	return errs.Err()
}
