# Daemon settings of the container image (/etc/herald/herald.hcl in the
# image `make image` builds; docs/deploy.md "Containers"). Every key can be
# overridden from the environment (HERALD_ and the key upper-cased, dots
# as underscores), which is how compose and the Helm chart configure it.
# The URLs have no default: a container started without them stops at once,
# naming the variable.

database {
  # The pipeline's and the CLI's login, the tables' owner.
  url       = "env:HERALD_DATABASE_URL"
  # The API's and the superadmin's logins (`herald db roles` creates them;
  # give their passwords in the URLs, or a passfile on a mounted secret).
  api_url   = "env:HERALD_DATABASE_API_URL"
  admin_url = "env:HERALD_DATABASE_ADMIN_URL"
  max_conns     = 16
  api_max_conns = 8
}

amqp {
  url = "env:HERALD_AMQP_URL"
}

http {
  # Every interface: the container's network is its own (or the host's,
  # with --network host; HERALD_HTTP_LISTEN then picks the address).
  listen = "0.0.0.0:8080"
  # The admin API (/metrics, plugins, rules reload) on loopback only;
  # anywhere else it needs HERALD_HTTP_ADMIN_TOKEN_FILE (the chart sets
  # both from a Secret).
  admin_listen = "127.0.0.1:8081"
}

plugins {
  # The five bundled plugins, owned by root in the read-only image. The
  # host runs private copies of them from TMPDIR (/tmp, a volume the image
  # declares: a tmpfs or an emptyDir, writable and executable).
  dir = "/usr/lib/herald/plugins"
}

# The packaged rules (the example rules, PUSH on FCM only); mount your own
# over /etc/herald/rules, or set HERALD_RULES (comma-separated paths).
rules = ["rules/*.hcl"]

log {
  # One JSON object a line, for the cluster's log shipper.
  json  = true
  level = "info"
}
