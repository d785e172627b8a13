# Herald quick-start rules: examples/rules/herald.hcl with every provider
# pointed at the local stand-ins that `herald devpeers` runs, so the quick
# start needs no provider account. docs/rules.md describes every field.
#
#   herald devpeers --smtp 127.0.0.1:2525 --http 127.0.0.1:4010 \
#                   --tls 127.0.0.1:4443 --tls-dir examples/quickstart/.devpeers
#
# The TLS peer (Web Push and APNs) writes its CA and fresh throw-away keys
# into --tls-dir at every start (git ignores examples/quickstart/.devpeers);
# scripts/run.sh starts the peers first and exports the CA's path and the
# keys as the HERALD_QUICKSTART_* variables the PUSH channel below reads,
# so these rules work from a copy anywhere too. It also writes every
# variable these rules read to .herald/quickstart.env: in another
# terminal, `source .herald/quickstart.env` and then
# `bin/herald rules check examples/quickstart/rules.hcl` or
# `bin/herald doctor` resolve them as herald serve does.
#
# The credentials below are dummies the dev peers accept. The dev peers are
# for demos and development only: for production, start from
# examples/rules/herald.hcl and your providers' real endpoints and secrets.
#
# Secrets do not belong in a rules file: any config value may be
# "env:NAME" (the daemon's environment variable NAME) or "file:PATH" (the
# file's contents, without its trailing newline; relative to this file),
# resolved by herald serve at every load and reload, so the plugin only
# ever sees the value. "raw:..." escapes a literal that starts with env:,
# file: or raw:. The SMS channel below takes its auth token from
# HERALD_QUICKSTART_SMS_AUTH_TOKEN (scripts/run.sh sets a dummy one).

defaults {
  time_zone = "UTC"
  locale    = "en"

  quiet_hours {
    start = "22:00"
    end   = "08:00"
  }

  retry {
    max_attempts = 5
    initial      = "2s"
    max          = "1m"
    multiplier   = 2
    jitter       = 0.2
  }

  # Customers belong to no group: these are their channels unless they
  # change a preference.
  user_type "CUSTOMER" {
    enabled = ["WEBSOCKET", "EMAIL", "PUSH", "SMS"]
  }
}

# SMTP peer: plain SMTP on loopback, no TLS, no AUTH.
channel "EMAIL" {
  providers = [{
    plugin = "email"
    name   = "devpeer-smtp"
    config = {
      host    = "127.0.0.1"
      port    = 2525
      tls     = "none"
      from    = "Herald Quick Start <noreply@herald.example>"
      timeout = "5s"
    }
  }]
  retry {
    max_attempts = 5
    initial      = "2s"
    max          = "1m"
  }
}

# One push provider for the three push services, each sending to the
# recipient's devices of its kind (directory "device_tokens" and "devices"):
#   fcm      FCM HTTP v1 shape: <endpoint>/v1/projects/<project_id>/messages:send
#            (the HTTP peer), to device_tokens and devices of kind fcm;
#   webpush  Web Push to each subscription's endpoint (the TLS peer's
#            /webpush/<id>, which checks the VAPID JWT and decrypts the payload);
#   apns     APNs provider API over HTTP/2 at apns_endpoint (the TLS peer).
# The CA, the VAPID pair and the APNs key are the ones `herald devpeers`
# wrote into --tls-dir; scripts/run.sh exports them (ca_file is the path of
# ca.pem, the others the files' contents). With the peers run by hand,
# "file:/path/to/tls-dir/vapid-public-key" and so on work as well.
channel "PUSH" {
  providers = [{
    plugin = "push"
    name   = "devpeer-push"
    config = {
      providers = ["fcm", "webpush", "apns"]
      ca_file   = "env:HERALD_QUICKSTART_CA_FILE"
      timeout   = "5s"

      endpoint     = "http://127.0.0.1:4010"
      project_id   = "herald-demo"
      access_token = "devpeer-dummy-access-token"

      vapid_subject     = "mailto:quickstart@herald.example"
      vapid_public_key  = "env:HERALD_QUICKSTART_VAPID_PUBLIC_KEY"
      vapid_private_key = "env:HERALD_QUICKSTART_VAPID_PRIVATE_KEY"
      # The subscriptions' endpoints are on loopback (the TLS peer).
      webpush_private_endpoints = true

      apns_endpoint = "https://127.0.0.1:4443"
      apns_key      = "env:HERALD_QUICKSTART_APNS_KEY"
      apns_key_id   = "DEVPEER001"
      apns_team_id  = "DEVPEERTM1"
      apns_topic    = "example.herald.quickstart"
    }
  }]
  retry {
    max_attempts = 3
  }
}

# Twilio Messages shape: <base_url>/2010-04-01/Accounts/<account_sid>/Messages.json.
channel "SMS" {
  providers = [{
    plugin = "sms"
    name   = "devpeer-twilio"
    config = {
      base_url    = "http://127.0.0.1:4010"
      account_sid = "AC00000000000000000000000000000000"
      auth_token  = "env:HERALD_QUICKSTART_SMS_AUTH_TOKEN" # or "file:/run/secrets/twilio-auth-token"
      from        = "+15005550006"
      timeout     = "5s"
    }
  }]
  retry {
    max_attempts = 3
    initial      = "5s"
  }
}

# Slack incoming webhooks (mode "webhook", no bot token), here the HTTP
# peer's stand-in for https://hooks.slack.com/services/T…/B…/<secret>.
# SLACK is a place channel: an event posts to it once, at the destination
# the restaurant's group holds for SLACK (directory.json: restaurant:5's
# "destinations" name the "reservations" webhook below), not once per
# staff member. Real webhook URLs are secrets: give them as "env:NAME" or
# "file:PATH"; the directory only names them.
channel "SLACK" {
  best_effort = true
  place       = true
  providers = [{
    plugin = "slack"
    name   = "devpeer-slack"
    config = {
      mode = "webhook"
      webhooks = {
        reservations = "http://127.0.0.1:4010/services/T0HERALDDEV/B0RESERVATIONS/quickstart"
      }
      default_webhook = "reservations"
      timeout         = "5s"
    }
  }]
}

# Browsers hold their sessions on herald serve's live gateway (/v1/live);
# the websocket plugin hands each delivery to it over RabbitMQ's live
# exchange, and reports "offline" when no daemon holds a session of the user.
# The plugin reaches the broker herald serve uses: scripts/run.sh exports
# HERALD_AMQP_URL (amqp://guest:guest@127.0.0.1:5672/ unless set), which
# is also the daemon's amqp.url.
channel "WEBSOCKET" {
  best_effort = true
  providers = [{
    plugin = "websocket"
    name   = "local-websocket"
    config = {
      amqp_url = "env:HERALD_AMQP_URL"
    }
  }]
}

# A customer asks for a table: the restaurant's staff must see it now.
event "RESERVATION_REQUESTED" {
  description = "A customer requested a reservation; the first staff member to act handles it."
  shared      = true

  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }

  mandatory = ["WEBSOCKET"]
  optional  = ["EMAIL", "PUSH", "SMS"]

  # One post to the restaurant's Slack channel per reservation, whoever
  # of its staff is reached (preferences and quiet hours are a person's:
  # they do not hold a post).
  post "SLACK" {
    to = "restaurant:{{ .payload.restaurant_id }}"
  }

  # The quick start must deliver whatever the hour; examples/rules/herald.hcl
  # drops intrusive channels during quiet hours instead ("drop").
  quiet_hours = "ignore"

  restrict "SMS" {
    roles = ["MANAGER"]
  }

  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people at {{ .payload.time }}"
    data  = { reservation_id = "{{ .payload.reservation_id }}" }

    locale "it" {
      title = "Nuova prenotazione"
      body  = "{{ .payload.customer_name }}, {{ .payload.pax }} persone alle {{ .payload.time }}"
    }
  }

  # The managers' e-mail is a digest: the reservations of one restaurant in
  # a minute (at most ten) arrive as one message listing them all, while
  # WEBSOCKET, PUSH, SMS and SLACK still go out per reservation.
  digest {
    channels  = ["EMAIL"]
    key       = "restaurant:{{ .payload.restaurant_id }}"
    window    = "1m"
    max_items = 10
  }

  template "EMAIL" {
    subject = "{{ if eq (len .items) 1 }}New reservation: {{ .payload.customer_name }} ({{ .payload.pax }}){{ else }}{{ len .items }} new reservations{{ end }}"
    body    = "{{ range .items }}{{ .payload.customer_name }} asked for a table for {{ .payload.pax }} at {{ .payload.time }}.\n{{ end }}"
    html    = "{{ range .items }}<p><b>{{ .payload.customer_name }}</b> asked for a table for {{ .payload.pax }} at {{ .payload.time }}.</p>{{ end }}"

    locale "it" {
      subject = "{{ if eq (len .items) 1 }}Nuova prenotazione: {{ .payload.customer_name }} ({{ .payload.pax }}){{ else }}{{ len .items }} nuove prenotazioni{{ end }}"
      body    = "{{ range .items }}{{ .payload.customer_name }} ha chiesto un tavolo per {{ .payload.pax }} alle {{ .payload.time }}.\n{{ end }}"
    }
  }

  template "SMS" {
    body = "Reservation: {{ .payload.customer_name }}, {{ .payload.pax }} at {{ .payload.time }}"
  }

  template "SLACK" {
    body = ":fork_and_knife: {{ .payload.customer_name }} asked for a table for {{ .payload.pax }} at {{ .payload.time }}"

    locale "it" {
      body = ":fork_and_knife: {{ .payload.customer_name }} ha chiesto un tavolo per {{ .payload.pax }} alle {{ .payload.time }}"
    }
  }

  payload_schema = <<JSON
{
  "type": "object",
  "required": ["reservation_id", "restaurant_id", "customer_name", "pax", "time"],
  "properties": {
    "reservation_id": {"type": ["string", "integer"]},
    "restaurant_id": {"type": ["string", "integer"]},
    "customer_name": {"type": "string", "minLength": 1},
    "pax": {"type": "integer", "minimum": 1},
    "time": {"type": "string"}
  }
}
JSON
}

# The restaurant confirmed: tell the customer.
event "RESERVATION_CONFIRMED" {
  audience {
    user = "{{ .payload.customer_id }}"
  }

  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL", "PUSH", "SMS"]
  quiet_hours = "defer"

  quiet_hours_by_channel = { EMAIL = "ignore" }

  inbox {
    title = "Reservation confirmed"
    body  = "Your table for {{ .payload.pax }} at {{ .payload.time }} is confirmed."

    locale "it" {
      title = "Prenotazione confermata"
      body  = "Il tuo tavolo per {{ .payload.pax }} alle {{ .payload.time }} è confermato."
    }
  }

  template "EMAIL" {
    subject = "Your reservation is confirmed"
    body    = "Your table for {{ .payload.pax }} at {{ .payload.time }} is confirmed."

    locale "it" {
      subject = "La tua prenotazione è confermata"
      body    = "Il tuo tavolo per {{ .payload.pax }} alle {{ .payload.time }} è confermato."
    }
  }

  template "SMS" {
    body = "Confirmed: table for {{ .payload.pax }} at {{ .payload.time }}."
  }

  payload_schema = <<JSON
{
  "type": "object",
  "required": ["reservation_id", "customer_id", "pax", "time"],
  "properties": {
    "reservation_id": {"type": ["string", "integer"]},
    "customer_id": {"type": ["string", "integer"]},
    "pax": {"type": "integer", "minimum": 1},
    "time": {"type": "string"}
  }
}
JSON
}
