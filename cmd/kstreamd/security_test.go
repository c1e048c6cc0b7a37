package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/pipeline"
)

// daemonPassword is the SASL password of the daemon tests: it must appear
// in no log line and no message.
const daemonPassword = "daemon-S3cr3t-4a9e-never-logged"

// leaks returns what of the password, in clear or as PLAIN's base64 SASL
// message, out holds.
func leaks(out, user, pass string) []string {
	var found []string
	for _, s := range []string{pass, pass[:12], base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + pass))} {
		if strings.Contains(out, s) {
			found = append(found, s)
		}
	}
	return found
}

// securedReferenceConfig is the reference job on the broker at broker, with
// the kafka section's kafkaSecurity appended and the log at debug.
func securedReferenceConfig(dir, broker, metrics, kafkaSecurity string) string {
	return jobHead("colorshape", 2, dir, brokersKafka(broker)+"\n"+kafkaSecurity, metrics, "debug") + referencePipeline
}

// TestDaemonWithSASL runs the reference job against a kfake broker that
// requires SASL (and TLS), with the log at debug, and greps the whole log
// output, and the output of `kstreamd validate`, for the password.
func TestDaemonWithSASL(t *testing.T) {
	for _, tc := range []struct {
		name, mechanism string
		tls, fromEnv    bool
	}{
		{"SCRAM-SHA-256 over mutual TLS, password file", "SCRAM-SHA-256", true, false},
		{"SCRAM-SHA-512, password env", "SCRAM-SHA-512", false, true},
		{"PLAIN, password env", "PLAIN", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certs := testkit.NewTLSCerts(t)
			opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(tc.mechanism, "kstreamd", daemonPassword)}
			if tc.tls {
				opts = append(opts, kfake.TLS(certs.ServerConfig(true)))
			}
			_, broker := startKfake(t, referenceTopics, opts...)
			metrics := testkit.FreeAddr(t)

			security := fmt.Sprintf("  sasl:\n    mechanism: %s\n    username: kstreamd\n", tc.mechanism)
			if tc.fromEnv {
				t.Setenv("KSTREAMD_KAFKA_PASSWORD", daemonPassword)
				security += "    password_env: KSTREAMD_KAFKA_PASSWORD"
			} else {
				pwFile := filepath.Join(dir, "kafka-password")
				if err := os.WriteFile(pwFile, []byte(daemonPassword+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				security += "    password_file: " + pwFile
			}
			if tc.tls {
				security += fmt.Sprintf("\n  tls:\n    enabled: true\n    ca_file: %s\n    cert_file: %s\n    key_file: %s",
					certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile)
			}
			cfgText := securedReferenceConfig(dir, broker, metrics, security)
			d := startDaemon(t, dir, cfgText, broker, metrics)
			path := filepath.Join(dir, "job.yaml")

			// The test's own clients use the same config.
			cfg, err := pipeline.Load(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(cfg.ClientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			produce(t, cl, rule("R1", "RECTANGLE", "TRIANGLE"))
			testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, 2)
			produce(t, cl, item(1, "blue", "RECTANGLE"), item(2, "red", "RECTANGLE"), item(3, "blue", "TRIANGLE"),
				item(4, "red", "CIRCLE"), item(5, "red", "TRIANGLE"))
			testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "matches"}, 2)
			got := matchStrings(t, consumeN(t, cfg, "matches", 2))
			if want := []string{"R1 blue 1,3", "R1 red 2,5"}; !slices.Equal(got, want) {
				t.Fatalf("matches = %q, want %q", got, want)
			}

			var out testkit.SyncBuffer
			if code := run(context.Background(), []string{"validate", "--config", path}, &out, &out); code != 0 || out.String() != path+": ok\n" {
				t.Fatalf("validate = %d %q", code, out.String())
			}
			if code := d.stop(t); code != 0 {
				t.Fatalf("exit status %d:\n%s", code, d.out.String())
			}
			log := d.out.String()
			wants := []string{
				"job stopped cleanly",
				fmt.Sprintf(`level=INFO msg="kafka client security" component=kafka-client tls=%t client_certificate=%t sasl_mechanism=%s`, tc.tls, tc.tls, tc.mechanism),
				`level=DEBUG msg="read SASLAuthenticate`, // franz-go's debug lines are in the log
			}
			if tc.mechanism == "PLAIN" {
				wants = append(wants, `level=WARN msg="kafka.sasl.mechanism PLAIN without kafka.tls: the password crosses the network in clear text" component=kafka-client`)
			}
			for _, want := range wants {
				if !strings.Contains(log, want) {
					t.Errorf("the log lacks %q:\n%s", want, log)
				}
			}
			if l := leaks(log, "kstreamd", daemonPassword); len(l) > 0 {
				t.Fatalf("the log holds the password (%q):\n%s", l, log)
			}
		})
	}
}

// consumeN reads n records of topic from its start with a client of cfg.
func consumeN(t *testing.T, cfg *pipeline.Config, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(cfg.ClientOptions(), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s: %v (after %d records)", topic, err, len(recs))
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// TestDaemonWrongPassword runs the daemon with a wrong password at debug
// until the broker has refused it, then stops it: neither password appears
// in the log.
func TestDaemonWrongPassword(t *testing.T) {
	const wrong = "wrong-" + daemonPassword
	dir := t.TempDir()
	_, broker := startKfake(t, referenceTopics, kfake.EnableSASL(), kfake.Superuser("PLAIN", "kstreamd", daemonPassword))
	t.Setenv("KSTREAMD_KAFKA_PASSWORD", wrong)
	metrics := testkit.FreeAddr(t)
	cfg := securedReferenceConfig(dir, broker, metrics,
		"  sasl:\n    mechanism: PLAIN\n    username: kstreamd\n    password_env: KSTREAMD_KAFKA_PASSWORD")
	d := launchDaemon(t, dir, cfg, broker, metrics)
	out := d.out
	// kfake hangs up on a failed authentication (rather than answering
	// SASL_AUTHENTICATION_FAILED), and the job keeps retrying.
	const failed = `level=DEBUG msg="connection initialization failed" component=kafka-client`
	refused := testkit.Poll(20*time.Second, func() bool { return strings.Count(out.String(), failed) >= 3 })
	// SIGTERM while the job waits for the brokers is a clean stop (exit 0)
	// that says the job never started.
	if code := d.stopWithin(t, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM while waiting for the brokers, want 0", code)
	}
	log := out.String()
	if !strings.Contains(log, `msg="stopped before the job started"`) {
		t.Errorf("the log lacks \"stopped before the job started\"")
	}
	if !refused {
		t.Fatalf("no failed authentication in the log:\n%s", log)
	}
	if l := append(leaks(log, "kstreamd", wrong), leaks(log, "kstreamd", daemonPassword)...); len(l) > 0 {
		t.Fatalf("the log holds a password (%q):\n%s", l, log)
	}
}

// TestValidateNeverPrintsSecrets runs `kstreamd validate` on configs whose
// problems sit next to secrets: an inline password (refused) and a password
// from the environment in a config that is otherwise wrong.
func TestValidateNeverPrintsSecrets(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KSTREAMD_KAFKA_PASSWORD", daemonPassword)
	for _, tc := range []struct {
		name, security, want string
	}{
		{"inline password", "  sasl:\n    mechanism: SCRAM-SHA-256\n    username: kstreamd\n    password: " + daemonPassword,
			"kafka.sasl.password: an inline password is refused: put it in an environment variable named by password_env, or a file named by password_file"},
		{"inline password of the wrong type", "  sasl:\n    mechanism: SCRAM-SHA-256\n    username: kstreamd\n    password: [" + daemonPassword + "]",
			"kafka.sasl.password: must be a string, got a list"},
		{"env password, other problems", "  sasl:\n    mechanism: scram-sha-256\n    username: kstreamd\n    password_env: KSTREAMD_KAFKA_PASSWORD\n  tls:\n    cert_file: " + filepath.Join(dir, "nope.pem"),
			`kafka.sasl.mechanism: unknown value "scram-sha-256" (did you mean "SCRAM-SHA-256"?); want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{"password file is a directory", "  sasl:\n    mechanism: PLAIN\n    username: kstreamd\n    password_file: " + dir,
			"kafka.sasl.password_file: cannot read the file it names: not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "job.yaml")
			if err := os.WriteFile(path, []byte(securedReferenceConfig(dir, "127.0.0.1:9092", "127.0.0.1:9249", tc.security)), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"validate", "run"} {
				var stdout, stderr testkit.SyncBuffer
				code := run(context.Background(), []string{cmd, "--config", path}, &stdout, &stderr)
				if code != 2 {
					t.Errorf("%s exit status %d, want 2", cmd, code)
				}
				if !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("%s stderr lacks %q:\n%s", cmd, tc.want, stderr.String())
				}
				if l := leaks(stdout.String()+stderr.String(), "kstreamd", daemonPassword); len(l) > 0 {
					t.Errorf("%s prints the password:\n%s%s", cmd, stdout.String(), stderr.String())
				}
			}
		})
	}
}
