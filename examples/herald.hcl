# Daemon settings for `herald serve` (the quick start uses this file).
# Every key can be overridden from the environment: HERALD_DATABASE_URL,
# HERALD_AMQP_URL, HERALD_HTTP_LISTEN, HERALD_PLUGINS_DIR, HERALD_RULES, ...
# docs/configuration.md lists every key, its default and its variable.
# The syntax is HCL2, as in the rules files: one setting per line inside a
# block, and expressions such as 8 * 2 work.
#
# Any value may be a reference instead of the secret itself:
#   "env:NAME"   the herald process's environment variable NAME
#   "file:PATH"  the file's contents, without its trailing newline
#                (relative to this file)
#   "raw:TEXT"   TEXT as written (a literal that starts with env:, file: or raw:)
# The quick start keeps the local servers' dummy passwords inline; in
# production write, for instance,
#   database { url = "file:/run/secrets/herald-database-url" }
#   amqp     { url = "env:HERALD_BROKER_URL" }
# and see docs/security.md for TLS to PostgreSQL and RabbitMQ.

database {
  # The pipeline and the CLI log in here; the role owns Herald's tables
  # after `herald migrate up`.
  url       = "postgres://herald:herald@127.0.0.1:5432/herald?sslmode=disable"
  # Production: TLS that checks the server's certificate and host name, the
  # URL (password included) kept in a file:
  #   url = "file:/run/secrets/herald-database-url"
  # holding postgres://herald:...@db.internal:5432/herald?sslmode=verify-full&sslrootcert=/etc/herald/pg-ca.pem
  max_conns = 16
  # Each part runs as its own role (SET ROLE at connect), and row-level
  # security keeps tenants apart: the public API as herald_api (one tenant
  # per transaction; the daemon refuses to start if that role could see
  # more), the pipeline as herald_worker, the superadmin API as
  # herald_admin (read only). The API and the superadmin log in as roles
  # of their own, members of herald_api and herald_admin only, so that not
  # even a query SQL injection made can RESET ROLE to the tables' owner:
  # `herald db roles` (scripts/run.sh runs it) creates them from these
  # URLs' users, with random passwords it writes to the passfile they name
  # (mode 0600; relative to this file: the repository's .herald/). herald
  # serve refuses to log these pools in as the owner unless
  # allow_owner_login = true.
  api_url   = "postgres://herald_api_login@127.0.0.1:5432/herald?sslmode=disable&passfile=../.herald/db-logins.pgpass"
  admin_url = "postgres://herald_admin_login@127.0.0.1:5432/herald?sslmode=disable&passfile=../.herald/db-logins.pgpass"
  api_max_conns = 8
  worker_role   = "herald_worker"
  api_role      = "herald_api"
  admin_role    = "herald_admin"
}

amqp {
  url      = "amqp://guest:guest@127.0.0.1:5672/"
  # Production: TLS, the URL (and its password) from the environment:
  #   url         = "env:HERALD_BROKER_URL"   # amqps://herald:...@mq.internal:5671/herald
  #   tls_ca_file = "/etc/herald/mq-ca.pem"   # the CA that signed the broker's certificate
  # A RabbitMQ cluster: every node instead of url, and quorum queues
  # (docs/operations.md "Scale"):
  #   urls       = ["amqp://herald:...@mq1:5672/herald", "amqp://herald:...@mq2:5672/herald", "amqp://herald:...@mq3:5672/herald"]
  #   queue_type = "quorum"
  exchange = "herald.deliveries"
  # With no queue blocks Herald declares one queue per channel
  # ("herald.email" bound to "*.EMAIL", ...). The seeds' per-recipient-type
  # queues are a matter of config:
  #   queue "notification.restaurant" {
  #     bindings    = ["STAFF.*"]
  #     prefetch    = 50
  #     concurrency = 4
  #   }
  #   queue "notification.customer"   { bindings = ["CUSTOMER.*"] }
  #   queue "notification.agency"     { bindings = ["AGENT.*"] }
  #   queue "notification.admin"      { bindings = ["ADMIN.*"] }
}

http {
  listen       = "127.0.0.1:8080"
  # The admin API (plugins ls/reload, rules reload, pprof). On loopback it
  # may run without a token (the daemon logs a warning); anywhere else
  # herald serve refuses to start without admin_token_file. Make one with
  #   umask 077; openssl rand -hex 32 > admin.token
  # (mode 0600: a token file its group or others can read is refused).
  # `herald plugins` finds it through --config / HERALD_CONFIG, or
  # --admin-token-file / HERALD_ADMIN_TOKEN_FILE.
  admin_listen = "127.0.0.1:8081"
  # admin_token_file = "admin.token" # relative to this file
  # pprof = true                     # /debug/pprof on the admin listener, behind the token

  # What one client can hold of either listener.
  read_header_timeout = "10s"
  read_timeout        = "30s"  # the whole request, body included
  write_timeout       = "30s"  # public API; the admin listener uses admin_write_timeout
  admin_write_timeout = "5m"   # a plugin reload takes up to 2m; pprof seconds must stay below it
  idle_timeout        = "2m"   # keep-alive connections waiting for their next request
  max_header_bytes    = 65536  # larger headers: 431
  max_conns           = 1024   # per listener; 0: no cap

  # Public API request rates (token buckets; 0 turns one off). Over it:
  # 429 with Retry-After and a problem document. per_ip counts every
  # request before authentication by the TCP peer's address (behind a
  # reverse proxy that is the proxy: limit there and set per_ip = 0).
  rate_limit {
    per_key = 100 # requests/s per API key
    per_ip  = 200 # requests/s per client IPv4 address or IPv6 /64
    burst   = 200
  }
}

# Relative paths are relative to this file.
plugins {
  dir = "../bin/plugins"
}

rules = ["quickstart/rules.hcl"]

relay {
  batch_size    = 100
  poll_interval = "200ms" # fallback; producers' NOTIFY wakes an idle relay
  max_attempts  = 5
  workers       = 2
}

publisher {
  batch_size  = 500 # also bounds one worker's publishes waiting for a broker confirm
  per_message = 50
  workers     = 2
}

retry {
  poll_interval = "1s"
  lease         = "2m"
}

# SIGTERM stops the stages in order (HTTP, relay, publishing, listeners,
# plugins) within shutdown_grace; past it herald exits 1 naming what still
# ran. A stage that fails stops the daemon with exit 1 (systemd:
# Restart=on-failure; TimeoutStopSec a little above shutdown_grace).
supervisor {
  shutdown_grace   = "30s"
  liveness_timeout = "1m" # the liveness lock lost this long: exit 1
}

# The daemon's soft memory limit (Go's GOMEMLIMIT, which wins when set):
# near it the garbage collector runs sooner and hands memory back. A safety
# net, not a cap; 0 turns it off.
runtime {
  memory_limit_mib = 80
}

log {
  level = "info"
}

# OpenTelemetry tracing, off by default. "otlp" exports spans to the
# collector the OTEL_EXPORTER_OTLP_* variables name; OTEL_TRACES_EXPORTER
# overrides this setting (docs/operations.md "Tracing").
tracing {
  exporter = "none"
}

# Retention: the daemon drops a whole monthly partition once every row in
# it is older (never a DELETE); events, archived notifications and tenants'
# shorter periods go in short bounded batches (docs/retention.md "Sweeps"). 0 or
# absent keeps rows forever. `herald retention status` shows what goes when.
retention {
  delivery_attempts      = "0s" # e.g. "720h": 30 days of attempt log
  notifications          = "0s" # e.g. "8760h": a year of inbox
  archived_notifications = "0s" # e.g. "720h": archived ones go 30 days after archiving (short batches)
  events                 = "0s" # e.g. "720h": PROCESSED/FAILED events; the producers' idempotency window
  # A tenant kept shorter than the rest (each period at most the global one):
  # tenant "acme" {
  #   notifications = "2160h"
  #   events        = "168h"
  # }
}
