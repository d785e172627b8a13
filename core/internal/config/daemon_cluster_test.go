package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/broker"
)

func TestLoadDaemonAMQPClusterURLsAndQueueType(t *testing.T) {
	t.Parallel()
	hclPath := writeFile(t, "herald.hcl", `
amqp {
  urls       = ["amqp://h:pw1@10.0.0.1:5672/herald", "amqp://h:pw2@10.0.0.2:5672/herald", "amqp://h:pw3@10.0.0.3:5672/herald"]
  queue_type = "quorum"
}
`)
	yamlPath := writeFile(t, "herald.yaml", `
amqp:
  urls: ["amqp://h:pw1@10.0.0.1:5672/herald", "amqp://h:pw2@10.0.0.2:5672/herald", "amqp://h:pw3@10.0.0.3:5672/herald"]
  queue_type: quorum
`)
	for _, p := range []string{hclPath, yamlPath} {
		d, err := LoadDaemon(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		want := []string{"amqp://h:pw1@10.0.0.1:5672/herald", "amqp://h:pw2@10.0.0.2:5672/herald", "amqp://h:pw3@10.0.0.3:5672/herald"}
		if got := d.AMQP.BrokerURLs(); !slices.Equal(got, want) {
			t.Errorf("%s: broker URLs %v, want %v", p, got, want)
		}
		if d.AMQP.URL != want[0] || d.AMQP.QueueType != broker.QueueQuorum {
			t.Errorf("%s: url %q queue_type %q", p, d.AMQP.URL, d.AMQP.QueueType)
		}
		// Every node's password is redacted from the logs.
		for _, pw := range []string{"pw1", "pw2", "pw3"} {
			if !slices.Contains(d.SecretValues(), pw) {
				t.Errorf("%s: secret values %v lack %s", p, d.SecretValues(), pw)
			}
		}
	}
}

func TestLoadDaemonAMQPURLStillWorks(t *testing.T) {
	t.Parallel()
	d, err := LoadDaemon(writeFile(t, "herald.hcl", `amqp { url = "amqp://u:p@mq:5672/" }`))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.AMQP.BrokerURLs(); !slices.Equal(got, []string{"amqp://u:p@mq:5672/"}) || d.AMQP.QueueType != broker.QueueClassic {
		t.Fatalf("broker URLs %v, queue type %q", got, d.AMQP.QueueType)
	}
	def, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if got := def.AMQP.BrokerURLs(); len(got) != 1 || got[0] != DefaultDaemon().AMQP.URL || def.AMQP.QueueType != broker.QueueClassic {
		t.Fatalf("defaults: broker URLs %v, queue type %q", got, def.AMQP.QueueType)
	}
}

func TestLoadDaemonAMQPURLsFromEnvironment(t *testing.T) {
	t.Setenv("HERALD_AMQP_URLS", "amqp://a:5672/,amqp://b:5672/")
	t.Setenv("HERALD_AMQP_QUEUE_TYPE", "quorum")
	d, err := LoadDaemon("")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.AMQP.BrokerURLs(); !slices.Equal(got, []string{"amqp://a:5672/", "amqp://b:5672/"}) || d.AMQP.QueueType != broker.QueueQuorum {
		t.Fatalf("broker URLs %v, queue type %q", got, d.AMQP.QueueType)
	}
}

func TestLoadDaemonAMQPClusterErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		body string
		want []string
	}{
		"unknown queue type": {`amqp { queue_type = "stream" }`, []string{"amqp.queue_type", `"stream"`, "classic", "quorum"}},
		"url and urls":       {"amqp {\n  url  = \"amqp://a/\"\n  urls = [\"amqp://b/\"]\n}", []string{"amqp.url and amqp.urls"}},
		"bad scheme in urls": {`amqp { urls = ["amqp://a/", "http://b/"] }`, []string{"amqp.urls[1]", `scheme "http"`}},
		"empty url in urls":  {`amqp { urls = ["amqp://a/", ""] }`, []string{"amqp.urls[1]: must not be empty"}},
		"tls with amqp urls": {"amqp {\n  urls            = [\"amqps://a/\", \"amqp://b/\"]\n  tls_server_name = \"mq\"\n}", []string{"amqp.urls[1]", "amqps://"}},
		"urls not a list":    {`amqp { urls = 5 }`, []string{"urls"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadDaemon(writeFile(t, "herald.hcl", tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "http://b/") {
				t.Errorf("error repeats a URL: %q", err)
			}
		})
	}
}
