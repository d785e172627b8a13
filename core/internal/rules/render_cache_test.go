package rules

import (
	"testing"
	"text/template"
)

func TestRecipientFree(t *testing.T) {
	cases := map[string]bool{
		`New reservation`: true,
		`{{ .payload.customer_name }}, {{ .payload.pax }}`:                           true,
		`{{ upper .payload.name }} on {{ .channel }} ({{ .event.type }})`:            true,
		`{{ if .payload.vip }}VIP {{ else }}guest {{ end }}{{ .payload.name }}`:      true,
		`Hello {{ .recipient.user_id }}`:                                             false,
		`{{ . }}`:                                                                    false,
		`{{ with .payload }}{{ .name }}{{ end }}`:                                    false,
		`{{ range .payload.items }}{{ . }}{{ end }}`:                                 false,
		`{{ $r := .recipient }}{{ $r.locale }}`:                                      false,
		`{{ if .recipient.locale }}x{{ end }}`:                                       false,
		`{{ define "x" }}{{ .recipient.user_id }}{{ end }}{{ template "x" . }}`:      false,
		`{{ printf "%s %s" .payload.name .recipient.user_id }}`:                      false,
		`{{ (index .payload "name") }}`:                                              true,
		`{{ .payload.name | printf "%s" }}`:                                          true,
		`{{ if eq .channel "EMAIL" }}mail{{ else if .recipient.phone }}sms{{ end }}`: false,
	}
	for src, want := range cases {
		tpl := template.Must(template.New("t").Funcs(templateFuncs).Parse(src))
		if got := recipientFree(tpl); got != want {
			t.Errorf("recipientFree(%q) = %v, want %v", src, got, want)
		}
	}
}
