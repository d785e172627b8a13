# Admin alerts to Slack through incoming webhooks: no bot token, config only.
# (The design notes route admin alerts to "Slack webhook".)
#
# Against the local stand-in (`herald devpeers`, which serves Slack's
# webhook shape at http://127.0.0.1:4010/services/T…/B…/<secret>):
#
#   export HERALD_SLACK_ALERTS_WEBHOOK=http://127.0.0.1:4010/services/T0HERALDDEV/B0ALERTS/demo
#   export HERALD_SLACK_ONCALL_WEBHOOK=http://127.0.0.1:4010/services/T0HERALDDEV/B0ONCALL/demo
#   bin/herald rules explain --rules examples/slack-webhook/rules.hcl \
#        --event examples/slack-webhook/alert.json --directory examples/slack-webhook/directory.json
#
# In production the variables hold the URLs Slack gave when the webhooks were
# created (https://hooks.slack.com/services/...); they are secrets, so they
# come from the environment ("env:NAME") or a file ("file:PATH"), never from
# this file. A URL that is not https (plain http is allowed only to a
# loopback host) is refused by `herald rules check` and at load, naming the
# field.
#
# How one alert becomes one Slack post: SLACK is a place channel
# (place = true): the event posts to it once, with the post block, at the
# destination the directory's group "team:ops" holds for SLACK (its
# "destinations" in directory.json: the "alerts" webhook), however many
# admins the audience reaches (they get the alert in their inbox). An
# alert with level "page" goes to "oncall" instead, because the template's
# data.webhook wins over the destination. `rules explain` prints
# "SLACK: one post to team:ops's channel".

defaults {
  time_zone = "UTC"
  locale    = "en"
}

channel "SLACK" {
  best_effort = true
  place       = true
  providers = [{
    plugin = "slack"
    name   = "slack-webhooks"
    config = {
      mode = "webhook"
      webhooks = {
        alerts = "env:HERALD_SLACK_ALERTS_WEBHOOK"
        oncall = "env:HERALD_SLACK_ONCALL_WEBHOOK"
      }
      default_webhook = "alerts"
      timeout         = "5s"
    }
  }]
}

event "SYSTEM_ALERT" {
  description = "An operational alert for the administrators, posted once to Slack."
  severity    = "critical"
  quiet_hours = "ignore"

  audience {
    user_type = "ADMIN"
  }

  post "SLACK" {
    to = "team:ops"
  }

  inbox {
    title = "{{ .payload.title }}"
    body  = "{{ .payload.message }}"
  }

  # title and body are the text fallback (notifications, old clients); the
  # blocks are what Slack shows.
  template "SLACK" {
    title = ":rotating_light: {{ .payload.title }}"
    body  = "{{ .payload.message }}"
    data = {
      webhook = "{{ if eq .payload.level \"page\" }}oncall{{ end }}"
      blocks  = <<JSON
[
  {"type": "header", "text": {"type": "plain_text", "text": {{ json .payload.title }}}},
  {"type": "section", "text": {"type": "mrkdwn", "text": {{ json .payload.message }}}},
  {"type": "context", "elements": [{"type": "mrkdwn", "text": {{ json (printf "level *%s* · host `%s`" .payload.level .payload.host) }}}]}
]
JSON
    }
  }

  payload_schema = <<JSON
{
  "type": "object",
  "required": ["title", "message", "level", "host"],
  "properties": {
    "title": {"type": "string", "minLength": 1, "maxLength": 150},
    "message": {"type": "string", "minLength": 1, "maxLength": 3000},
    "level": {"enum": ["info", "warning", "page"]},
    "host": {"type": "string"}
  }
}
JSON
}
