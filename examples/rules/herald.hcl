# Herald rules: who hears about each event, and on which channels.
# The same rules are in herald.yaml; docs/rules.md describes every field.

defaults {
  time_zone = "Europe/Rome"
  locale    = "en"

  # Used for recipients whose user, group and user type give no window.
  quiet_hours {
    start = "22:00"
    end   = "08:00"
  }

  retry {
    max_attempts = 5
    initial      = "2s"
    max          = "10m"
    multiplier   = 2
    jitter       = 0.2
  }

  # Customers belong to no group: these are their channels unless they
  # change a preference.
  user_type "CUSTOMER" {
    enabled = ["WEBSOCKET", "EMAIL", "PUSH", "SMS"]
  }

  user_type "ADMIN" {
    quiet_hours {
      start = "23:00"
      end   = "07:00"
    }
  }
}

channel "EMAIL" {
  providers = [
    {
      plugin   = "email"
      name     = "smtp-primary"
      priority = 0
      config   = { host = "smtp.example.com", port = 587, from = "Herald <noreply@example.com>" }
    },
    {
      plugin   = "email"
      name     = "smtp-backup"
      priority = 10
      config   = { host = "smtp-backup.example.com", port = 587, from = "Herald <noreply@example.com>" }
    },
  ]
  retry {
    max_attempts = 5
    initial      = "2s"
    max          = "10m"
  }
}

# One push provider for the three push services: each sends to the
# recipient's devices of its kind (directory "devices"), so a user with an
# Android phone, an iPhone and a browser gets the message on all three.
# The VAPID pair comes from `herald webpush keys` and the .p8 from Apple;
# both here are throw-away demo keys: give yours as "file:..." references.
channel "PUSH" {
  providers = [{
    plugin = "push"
    config = {
      providers  = ["fcm", "webpush", "apns"]
      project_id   = "herald-demo"
      endpoint     = "https://push.example.com"
      access_token = "demo-access-token" # production: credentials_file

      vapid_subject     = "mailto:ops@example.com"
      vapid_public_key  = "BEDJ_bJFwPv-mg-esB3TL8t3W9bEe5P7iz0TpgvD8iIMdre4jA4jXrmkQxEX3O59u5jcd6uZAPRsSG-uFlrg3tY"
      vapid_private_key = "2FFaLyH4rLrCJKu6Sg162Wrj_mH_eTEeL5NaOwq0SSY"
      webpush_ttl       = "12h"

      apns_endpoint = "https://api.sandbox.push.apple.com"
      apns_key      = "file:../keys/AuthKey_DEMOKEY001.p8"
      apns_key_id   = "DEMOKEY001"
      apns_team_id  = "DEMOTEAM01"
      apns_topic    = "com.example.herald"
    }
  }]
  retry {
    max_attempts = 3
  }
}

channel "SMS" {
  providers = [{ plugin = "sms", config = { account_sid = "AC-demo", from = "+15005550006", endpoint = "https://sms.example.com" } }]
  retry {
    max_attempts = 3
    initial      = "5s"
  }
}

# Slack through incoming webhooks (mode "webhook"): no bot token, one URL per
# Slack channel, by name. A delivery goes to the webhook its template's
# data.webhook names, else to its recipient's slack_webhook attribute, else to
# default_webhook. Webhook URLs are secrets: in production write them as
# "env:NAME" or "file:PATH" (docs/plugins.md, "Slack incoming webhooks").
# With a bot token instead: config = { token = "env:SLACK_BOT_TOKEN", default_channel = "#ops" }.
channel "SLACK" {
  best_effort = true
  user_types  = ["STAFF", "AGENT", "ADMIN"]
  providers = [{
    plugin = "slack"
    name   = "slack-webhooks"
    config = {
      mode = "webhook"
      webhooks = {
        ops    = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
        alerts = "https://hooks.slack.com/services/T00000000/B00000001/XXXXXXXXXXXXXXXXXXXXXXXX"
      }
      default_webhook = "ops"
    }
  }]
}

channel "WEBSOCKET" {
  best_effort = true
  providers   = [{ plugin = "websocket" }]
}

# A customer asks for a table: the restaurant's staff must see it now.
event "RESERVATION_REQUESTED" {
  description = "A customer requested a reservation; the first staff member to act handles it."
  shared      = true

  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }

  mandatory   = ["WEBSOCKET"]
  optional    = ["EMAIL", "PUSH", "SMS"]
  quiet_hours = "drop"

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

  template "EMAIL" {
    subject = "New reservation: {{ .payload.customer_name }} ({{ .payload.pax }})"
    body    = "{{ .payload.customer_name }} asked for a table for {{ .payload.pax }} at {{ .payload.time }}."
    html    = "<p><b>{{ .payload.customer_name }}</b> asked for a table for {{ .payload.pax }} at {{ .payload.time }}.</p>"

    locale "it" {
      subject = "Nuova prenotazione: {{ .payload.customer_name }} ({{ .payload.pax }})"
      body    = "{{ .payload.customer_name }} ha chiesto un tavolo per {{ .payload.pax }} alle {{ .payload.time }}."
    }
  }

  template "SMS" {
    body = "Reservation: {{ .payload.customer_name }}, {{ .payload.pax }} at {{ .payload.time }}"
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

  template "SMS" {
    body = "Confirmed: table for {{ .payload.pax }} at {{ .payload.time }}."
  }

  # The webpush_* and apns_* data keys set the push services' headers for
  # this message (docs/plugins.md); the plugin takes them out of the data.
  template "PUSH" {
    title = "Reservation confirmed"
    body  = "Your table for {{ .payload.pax }} at {{ .payload.time }} is confirmed."
    data = {
      reservation_id   = "{{ .payload.reservation_id }}"
      webpush_urgency  = "high"
      webpush_ttl      = "30m"
      apns_collapse_id = "reservation-{{ .payload.reservation_id }}"
    }
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

# An agency partner got an assignment.
event "PARTNER_ASSIGNMENT" {
  audience {
    group = "agency:{{ .payload.agency_id }}"
    roles = ["MANAGER", "AGENT"]
  }

  mandatory = ["WEBSOCKET"]
  optional  = ["EMAIL", "PUSH", "SMS", "SLACK"]

  restrict "SMS" {
    roles = ["MANAGER", "AGENT"]
  }

  inbox {
    title = "New assignment"
    body  = "Assignment {{ .payload.assignment_id }} for {{ .payload.partner_name }}"
  }

  template "SLACK" {
    body = ":briefcase: assignment {{ .payload.assignment_id }} for {{ .payload.partner_name }}"
  }
}

# A chat message reaches the users the producer lists in the payload.
event "CHAT_MESSAGE_SENT" {
  audience {
    payload_path = "recipients"
  }

  mandatory   = ["WEBSOCKET"]
  optional    = ["PUSH"]
  quiet_hours = "defer"

  inbox {
    title = "{{ .payload.sender_name }}"
    body  = "{{ .payload.text }}"
  }
}

# A broadcast to every administrator.
event "SYSTEM_ANNOUNCEMENT" {
  severity    = "warning"
  quiet_hours = "ignore"

  audience {
    user_type = "ADMIN"
  }

  mandatory = ["WEBSOCKET"]
  optional  = ["EMAIL", "SLACK"]

  inbox {
    title = "{{ .payload.title }}"
    body  = "{{ .payload.message }}"
  }

  template "EMAIL" {
    subject = "[Herald] {{ .payload.title }}"
    body    = "{{ .payload.message }}"
  }

  # Admin alerts go to the alerts webhook as Block Kit; title and body are
  # the notification's text fallback. Every admin who has SLACK gets a post;
  # to post once per event, address one recipient that stands for the room
  # (examples/slack-webhook).
  template "SLACK" {
    title = "{{ .payload.title }}"
    body  = "{{ .payload.message }}"
    data = {
      webhook = "alerts"
      blocks  = <<JSON
[
  {"type": "header", "text": {"type": "plain_text", "text": {{ json .payload.title }}}},
  {"type": "section", "text": {"type": "mrkdwn", "text": {{ json .payload.message }}}}
]
JSON
    }
  }
}
