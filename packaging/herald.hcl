# Daemon settings for `herald serve`, as the Debian package installs them
# (/etc/herald/herald.hcl; the herald.service unit runs with it).
# docs/configuration.md lists every key, its default and its variable,
# docs/deploy.md the packaged layout (both under /usr/share/doc/herald/).
# The syntax is HCL2, as in the rules files.
#
# Secrets stay out of this file. Every key can be overridden from the
# environment, and the unit reads /etc/herald/herald.env (mode 0640, group
# herald) into it: set HERALD_DATABASE_URL and HERALD_AMQP_URL there. Any
# value may also be a reference instead of the secret itself:
#   "env:NAME"   the herald process's environment variable NAME
#   "file:PATH"  the file's contents, without its trailing newline
#                (relative to this file)
#   "raw:TEXT"   TEXT as written

database {
  # The pipeline and the CLI log in here (HERALD_DATABASE_URL overrides it);
  # the role owns Herald's tables after `herald migrate up`. Production: TLS
  # that checks the server, e.g.
  #   postgres://herald:...@db.internal:5432/herald?sslmode=verify-full&sslrootcert=/etc/herald/pg-ca.pem
  url           = "postgres://herald@127.0.0.1:5432/herald?sslmode=disable"
  max_conns     = 16
  # The API and the superadmin log in as roles of their own, members of
  # herald_api and herald_admin only (never the tables' owner, which
  # herald serve refuses unless allow_owner_login = true). `herald db
  # roles` creates them from these URLs' users, with random passwords it
  # writes to the passfile they name (mode 0600; run it as the herald user,
  # docs/deploy.md). Another host or TLS: change these with url, or set
  # HERALD_DATABASE_API_URL and HERALD_DATABASE_ADMIN_URL in herald.env.
  api_url       = "postgres://herald_api_login@127.0.0.1:5432/herald?sslmode=disable&passfile=/var/lib/herald/db-logins.pgpass"
  admin_url     = "postgres://herald_admin_login@127.0.0.1:5432/herald?sslmode=disable&passfile=/var/lib/herald/db-logins.pgpass"
  api_max_conns = 8
  worker_role   = "herald_worker"
  api_role      = "herald_api"
  admin_role    = "herald_admin"
}

amqp {
  # HERALD_AMQP_URL overrides it; RabbitMQ's guest user only logs in from
  # loopback. Production: amqps:// and tls_ca_file = "/etc/herald/mq-ca.pem".
  url      = "amqp://guest:guest@127.0.0.1:5672/"
  exchange = "herald.deliveries"
}

http {
  listen       = "127.0.0.1:8080"
  # The admin API (/metrics, plugins ls/reload, rules reload, pprof),
  # behind the token the package's postinst writes to /etc/herald/admin.token
  # (mode 0600, owner herald) when it is missing. `herald plugins ls
  # --config /etc/herald/herald.hcl` finds it through this file.
  admin_listen     = "127.0.0.1:8081"
  admin_token_file = "admin.token" # relative to this file

  read_header_timeout = "10s"
  read_timeout        = "30s"
  write_timeout       = "30s"
  admin_write_timeout = "5m"
  idle_timeout        = "2m"
  max_header_bytes    = 65536
  max_conns           = 1024

  rate_limit {
    per_key = 100
    per_ip  = 200
    burst   = 200
  }
}

plugins {
  # The five bundled channel plugins (herald-plugin-email, -push, -sms,
  # -slack, -websocket); root owns the directory and the binaries, which
  # the plugin host requires (nobody else may be able to write them).
  dir = "/usr/lib/herald/plugins"
}

# Relative paths are relative to this file: /etc/herald/rules/herald.hcl.
# `herald rules check /etc/herald/rules/herald.hcl` checks a change before
# `systemctl reload herald` (SIGHUP reloads the rules).
rules = ["rules/herald.hcl"]

relay {
  batch_size    = 100
  poll_interval = "200ms"
  max_attempts  = 5
  workers       = 2
}

publisher {
  batch_size  = 500
  per_message = 50
  workers     = 2
}

retry {
  poll_interval = "1s"
  lease         = "2m"
}

log {
  # journald keeps the lines; json = true for a log shipper.
  level = "info"
}
