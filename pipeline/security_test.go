package pipeline

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// testPassword is the SASL password of the tests; no output may contain it.
const testPassword = "pw-S3cr3t-7d1f9c-do-not-print"

// securedYAML is the minimal job on brokers, with kafkaExtra (indented
// two spaces, under kafka:) appended to its kafka section.
func securedYAML(brokers []string, kafkaExtra string) string {
	return fmt.Sprintf(`job:
  name: secure
kafka:
  brokers: [%s]
%s
sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
operators:
  - name: matcher
    type: shape_pair_matcher
    input: items
    key_by: color
    broadcast: rules
sinks:
  - name: matches
    input: matcher
    topic: matches
`, strings.Join(brokers, ", "), kafkaExtra)
}

// parseSecured parses securedYAML and fails the test on a problem.
func parseSecured(t *testing.T, brokers []string, kafkaExtra string) *Config {
	t.Helper()
	cfg, err := Parse("secure.yaml", []byte(securedYAML(brokers, kafkaExtra)), nil)
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return cfg
}

// writeSecret writes content to a new file and returns its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSecretRedacted(t *testing.T) {
	s := Secret(testPassword)
	if s.Reveal() != testPassword {
		t.Fatalf("Reveal() = %q", s.Reveal())
	}
	cfg := validConfig()
	cfg.Kafka.SASL = SASLConfig{Mechanism: SASLScramSHA256, Username: "kstreamd", PasswordEnv: "X", Password: s}
	type wrapper struct{ Pw Secret }
	jsonCfg, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	yamlCfg, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var textLog, jsonLog bytes.Buffer
	for _, l := range []*slog.Logger{slog.New(slog.NewTextHandler(&textLog, nil)), slog.New(slog.NewJSONHandler(&jsonLog, nil))} {
		l.Info("m", "secret", s, "sasl", cfg.Kafka.SASL, "config", cfg, slog.String("string", s.String()))
	}
	outputs := map[string]string{
		"%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s), "%q": fmt.Sprintf("%q", s),
		"%x": fmt.Sprintf("%x", s), "%d": fmt.Sprintf("%d", s), "%#v": fmt.Sprintf("%#v", s),
		"%10.3s": fmt.Sprintf("%10.3s", s), "String": s.String(), "GoString": s.GoString(),
		"Sprint": fmt.Sprint(s), "Sprintln": fmt.Sprintln(s), "MarshalText": string(text),
		"struct %v": fmt.Sprintf("%v", wrapper{s}), "struct %+v": fmt.Sprintf("%+v", wrapper{s}),
		"struct %#v": fmt.Sprintf("%#v", wrapper{s}), "pointer %+v": fmt.Sprintf("%+v", &wrapper{s}),
		"config %+v": fmt.Sprintf("%+v", cfg), "config %#v": fmt.Sprintf("%#v", *cfg),
		"sasl %+v": fmt.Sprintf("%+v", cfg.Kafka.SASL), "json": string(jsonCfg), "yaml": string(yamlCfg),
		"slog text": textLog.String(), "slog json": jsonLog.String(),
		"error %v": fmt.Errorf("auth with %v: %w", s, errors.New("x")).Error(),
	}
	for name, out := range outputs {
		if strings.Contains(out, testPassword) || strings.Contains(out, testPassword[:6]) {
			t.Errorf("%s prints the secret: %s", name, out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("%s = %q, want [redacted] in it", name, out)
		}
	}
	if got := fmt.Sprintf("%v|%s|%#v", s, s, s); got != "[redacted]|[redacted]|[redacted]" {
		t.Errorf("verbs = %q", got)
	}
	if !strings.Contains(string(jsonCfg), `"Password":"[redacted]"`) {
		t.Errorf("json: %s", jsonCfg)
	}
	if !strings.Contains(string(yamlCfg), "password: '[redacted]'") {
		t.Errorf("yaml: %s", yamlCfg)
	}
}

// TestValidateSecurity checks kafka.tls and kafka.sasl of a Config built in
// code: every message, and what Validate loads.
func TestValidateSecurity(t *testing.T) {
	certs := testkit.NewTLSCerts(t)
	pwFile := writeSecret(t, testPassword+"\n")
	crlfFile := writeSecret(t, testPassword+"\r\n")
	emptyFile := writeSecret(t, "\n")
	bigFile := writeSecret(t, strings.Repeat("x", 64<<10+1))
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KSTREAMD_TEST_PW", testPassword)
	t.Setenv("KSTREAMD_TEST_EMPTY_PW", "")
	const unsetVar = "KSTREAMD_TEST_PW_NEVER_SET"
	if err := os.Unsetenv(unsetVar); err != nil { // t.Setenv above makes Unsetenv safe: env is restored
		t.Fatal(err)
	}
	scram := func(s *SASLConfig) { s.Mechanism, s.Username = SASLScramSHA256, "kstreamd" }
	tests := []struct {
		name     string
		tls      TLSConfig
		sasl     func(s *SASLConfig)
		want     string // "" for valid
		password string // the password Validate resolves
		roots    bool   // Validate loads a CA pool
		cert     bool   // and a client certificate
		embedded bool   // clients dial the embedded broker
	}{
		{name: "off"},
		{name: "tls with system roots", tls: TLSConfig{Enabled: true}},
		{name: "tls with ca", tls: TLSConfig{Enabled: true, CAFile: certs.CAFile}, roots: true},
		{name: "tls with client certificate", tls: TLSConfig{Enabled: true, CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}, roots: true, cert: true},
		{name: "missing ca", tls: TLSConfig{Enabled: true, CAFile: "/nonexistent/ca.pem"},
			want: `kafka.tls.ca_file: cannot read "/nonexistent/ca.pem": no such file or directory`},
		{name: "ca is a directory", tls: TLSConfig{Enabled: true, CAFile: os.TempDir()},
			want: fmt.Sprintf(`kafka.tls.ca_file: cannot read %q: not a regular file`, os.TempDir())},
		{name: "ca is a device", tls: TLSConfig{Enabled: true, CAFile: "/dev/zero"},
			want: `kafka.tls.ca_file: cannot read "/dev/zero": not a regular file`},
		{name: "ca is a key", tls: TLSConfig{Enabled: true, CAFile: certs.ClientKeyFile},
			want: fmt.Sprintf(`kafka.tls.ca_file: no PEM certificate in %q`, certs.ClientKeyFile)},
		{name: "cert without key", tls: TLSConfig{Enabled: true, CertFile: certs.ClientCertFile},
			want: "kafka.tls.cert_file: needs kafka.tls.key_file: set both or neither"},
		{name: "key without cert", tls: TLSConfig{Enabled: true, KeyFile: certs.ClientKeyFile},
			want: "kafka.tls.key_file: needs kafka.tls.cert_file: set both or neither"},
		{name: "key of another certificate", tls: TLSConfig{Enabled: true, CertFile: certs.ClientCertFile, KeyFile: certs.ServerKeyFile},
			want: fmt.Sprintf(`kafka.tls.cert_file: client certificate %q with key %q: tls: private key does not match public key`, certs.ClientCertFile, certs.ServerKeyFile)},
		{name: "missing key file", tls: TLSConfig{Enabled: true, CertFile: certs.ClientCertFile, KeyFile: "/nonexistent/key.pem"},
			want: `kafka.tls.key_file: cannot read "/nonexistent/key.pem": no such file or directory`},
		{name: "tls fields while disabled", tls: TLSConfig{CertFile: "c", KeyFile: "k", ServerName: "kafka", InsecureSkipVerify: true}, want: strings.Join([]string{
			"kafka.tls.cert_file: set, but kafka.tls.enabled is false: set enabled: true to dial with TLS",
			"kafka.tls.key_file: set, but kafka.tls.enabled is false: set enabled: true to dial with TLS",
			"kafka.tls.server_name: set, but kafka.tls.enabled is false: set enabled: true to dial with TLS",
			"kafka.tls.insecure_skip_verify: set, but kafka.tls.enabled is false: set enabled: true to dial with TLS",
		}, "\n")},
		{name: "password from env", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = "KSTREAMD_TEST_PW" }, password: testPassword},
		{name: "password file, newline trimmed", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = pwFile }, password: testPassword},
		{name: "password file, crlf trimmed", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = crlfFile }, password: testPassword},
		{name: "revalidate overwrites", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = "KSTREAMD_TEST_PW"; s.Password = "stale" }, password: testPassword},
		{name: "PLAIN", sasl: func(s *SASLConfig) { scram(s); s.Mechanism = SASLPlain; s.PasswordEnv = "KSTREAMD_TEST_PW" }, password: testPassword},
		{name: "SCRAM-SHA-512", sasl: func(s *SASLConfig) { scram(s); s.Mechanism = SASLScramSHA512; s.PasswordEnv = "KSTREAMD_TEST_PW" }, password: testPassword},
		{name: "unset variable", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = unsetVar },
			want: "kafka.sasl.password_env: the environment variable it names is not set"},
		{name: "password in password_env", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = testPassword },
			want: "kafka.sasl.password_env: must be the name of an environment variable (letters, digits and _, not starting with a digit), not the password"},
		{name: "missing password file", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = testPassword },
			want: "kafka.sasl.password_file: cannot read the file it names: no such file or directory"},
		{name: "empty variable", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = "KSTREAMD_TEST_EMPTY_PW" },
			want: "kafka.sasl.password_env: the environment variable it names is empty"},
		{name: "password file too large", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = bigFile },
			want: "kafka.sasl.password_file: cannot read the file it names: file too large: more than 65536 bytes"},
		{name: "password file is a FIFO", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = fifo },
			want: "kafka.sasl.password_file: cannot read the file it names: not a regular file"},
		{name: "empty file", sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = emptyFile },
			want: "kafka.sasl.password_file: the file it names is empty"},
		{name: "both", sasl: func(s *SASLConfig) { scram(s); s.PasswordEnv = "KSTREAMD_TEST_PW"; s.PasswordFile = pwFile },
			want: "kafka.sasl.password_file: password_env is also set: set exactly one of password_env and password_file"},
		{name: "neither", sasl: scram,
			want: "kafka.sasl: a password is required: set password_env (an environment variable) or password_file (a file)"},
		{name: "inline", sasl: func(s *SASLConfig) { scram(s); s.Password = testPassword },
			want: "kafka.sasl.password: an inline password is refused: put it in an environment variable named by password_env, or a file named by password_file"},
		{name: "no username", sasl: func(s *SASLConfig) { scram(s); s.Username = ""; s.PasswordFile = pwFile },
			want: "kafka.sasl.username: required"},
		{name: "lower case", sasl: func(s *SASLConfig) { scram(s); s.Mechanism = "scram-sha-512"; s.PasswordFile = pwFile },
			want: `kafka.sasl.mechanism: unknown value "scram-sha-512" (did you mean "SCRAM-SHA-512"?); want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "close typo", sasl: func(s *SASLConfig) { scram(s); s.Mechanism = "SCRAM-SHA-265"; s.PasswordFile = pwFile },
			want: `kafka.sasl.mechanism: unknown value "SCRAM-SHA-265" (did you mean "SCRAM-SHA-256"?); want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "OAUTHBEARER", sasl: func(s *SASLConfig) { scram(s); s.Mechanism = "OAUTHBEARER"; s.PasswordFile = pwFile },
			want: `kafka.sasl.mechanism: unknown value "OAUTHBEARER"; want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "embedded broker", embedded: true, tls: TLSConfig{Enabled: true}, sasl: func(s *SASLConfig) { scram(s); s.PasswordFile = pwFile }, want: strings.Join([]string{
			"kafka.tls.enabled: the embedded broker (kafka.embedded.enabled without kafka.brokers) serves neither TLS nor SASL",
			"kafka.sasl.mechanism: the embedded broker (kafka.embedded.enabled without kafka.brokers) serves neither TLS nor SASL",
		}, "\n")},
		{name: "sasl fields without mechanism", sasl: func(s *SASLConfig) { s.Username = "u"; s.PasswordEnv = "KSTREAMD_TEST_PW"; s.PasswordFile = pwFile }, want: strings.Join([]string{
			"kafka.sasl.username: set, but kafka.sasl.mechanism is empty (no SASL): set mechanism to one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
			"kafka.sasl.password_env: set, but kafka.sasl.mechanism is empty (no SASL): set mechanism to one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
			"kafka.sasl.password_file: set, but kafka.sasl.mechanism is empty (no SASL): set mechanism to one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
		}, "\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			if tc.embedded {
				c.Kafka.Brokers, c.Kafka.Embedded.Enabled = nil, true
			}
			c.Kafka.TLS = tc.tls
			if tc.sasl != nil {
				tc.sasl(&c.Kafka.SASL)
			}
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want %q", tc.want)
			case tc.want != "":
				if err.Error() != tc.want {
					t.Errorf("Validate() =\n%v\nwant\n%v", err, tc.want)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("the message holds the password: %v", err)
				}
				return
			}
			if got := c.Kafka.SASL.Password.Reveal(); got != tc.password {
				t.Errorf("Password = %q, want %q", got, tc.password)
			}
			l := c.Kafka.TLS.loaded
			if l == nil != !tc.tls.Enabled {
				t.Fatalf("TLS loaded = %v with enabled %v", l, tc.tls.Enabled)
			}
			if l != nil && (l.roots != nil) != tc.roots {
				t.Errorf("CA pool loaded = %v, want %v", l.roots != nil, tc.roots)
			}
			if l != nil && (l.cert != nil) != tc.cert {
				t.Errorf("client certificate loaded = %v, want %v", l.cert != nil, tc.cert)
			}
			if l != nil && l.cert != nil && l.cert.Leaf.Subject.CommonName != "kstreamd-client" {
				t.Errorf("client certificate CN = %q", l.cert.Leaf.Subject.CommonName)
			}
		})
	}
}

// TestInlinePasswordNeverEchoed checks that the refused inline password of
// the golden config appears in no message, whatever else is wrong.
func TestInlinePasswordNeverEchoed(t *testing.T) {
	for _, doc := range []string{
		"  sasl:\n    mechanism: PLAIN\n    username: u\n    password: " + testPassword,
		"  sasl:\n    password: " + testPassword,
		"  sasl:\n    mechanism: PLAINTEXT\n    password: \"" + testPassword + "\"\n    password_env: " + testPassword,
		"  sasl:\n    password: [" + testPassword + "]",
		"  sasl:\n    password: {" + testPassword + ": 1}",
		"  sasl:\n    passwd: " + testPassword,
		"  sasl:\n    mechanism: PLAIN\n    username: u\n    password_env: " + testPassword,
		"  sasl:\n    mechanism: PLAIN\n    username: u\n    password_file: " + testPassword,
	} {
		_, err := Parse("inline.yaml", []byte(securedYAML([]string{"localhost:9092"}, doc)), nil)
		if err == nil {
			t.Fatalf("accepted:\n%s", doc)
		}
		if strings.Contains(err.Error(), testPassword) {
			t.Errorf("message echoes the password:\n%v", err)
		}
	}
	data, err := os.ReadFile("testdata/sasl_inline_password.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("hunter2-inline-secret")) {
		t.Fatal("the golden config lost its inline password")
	}
	_, err = Load("testdata/sasl_inline_password.bad.yaml", nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Load = %v", err)
	}
}

// cluster starts a one-broker kfake cluster with topic "t" and opts,
// closed when the test ends.
func cluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// roundTrip produces one record to topic "t" with a client built from cfg's
// ClientOptions and reads it back with a second one. It returns the first
// error; the record read must be the one written.
func roundTrip(t *testing.T, cfg *Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(append(cfg.ClientOptions(), kgo.RequestRetries(1))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := prod.Ping(ctx); err != nil {
		return err
	}
	value := fmt.Sprintf("value-%d", time.Now().UnixNano())
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(value)}).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	cons, err := kgo.NewClient(append(cfg.ClientOptions(), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cons.Close()
	var got []string
	for len(got) == 0 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[len(got)-1] != value {
		t.Fatalf("consumed %q, want the produced %q last", got, value)
	}
	return nil
}

// TestClientOptionsSASL authenticates against kfake with each mechanism,
// with the password from a file and from the environment, and with a
// wrong one.
func TestClientOptionsSASL(t *testing.T) {
	for _, mech := range []SASLMechanism{SASLScramSHA256, SASLScramSHA512, SASLPlain} {
		t.Run(string(mech), func(t *testing.T) {
			brokers := cluster(t, kfake.EnableSASL(), kfake.Superuser(string(mech), "kstreamd", testPassword))
			t.Setenv("KSTREAMD_TEST_PW", testPassword)
			t.Setenv("KSTREAMD_TEST_WRONG_PW", testPassword+"-wrong")
			for _, tc := range []struct {
				name, source string
				ok           bool
			}{
				{"password file", "password_file: " + writeSecret(t, testPassword+"\n"), true},
				{"password env", "password_env: KSTREAMD_TEST_PW", true},
				{"wrong password", "password_env: KSTREAMD_TEST_WRONG_PW", false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					cfg := parseSecured(t, brokers, fmt.Sprintf("  sasl:\n    mechanism: %s\n    username: kstreamd\n    %s", mech, tc.source))
					err := roundTrip(t, cfg)
					switch {
					case tc.ok && err != nil:
						t.Fatalf("round trip: %v", err)
					case !tc.ok && !errors.Is(err, io.EOF):
						// kfake drops the connection instead of answering
						// SASL_AUTHENTICATION_FAILED.
						t.Fatalf("round trip with a wrong password = %v, want the broker to hang up (EOF)", err)
					case err != nil && strings.Contains(err.Error(), testPassword):
						t.Errorf("the error holds the password: %v", err)
					}
				})
			}
		})
	}
	t.Run("no SASL against a SASL broker", func(t *testing.T) {
		brokers := cluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "kstreamd", testPassword))
		cfg := parseSecured(t, brokers, "")
		if err := roundTrip(t, cfg); err == nil {
			t.Fatal("a client without SASL was served")
		}
	})
}

// TestClientOptionsTLS dials a kfake broker serving TLS with the test CA's
// certificate for 127.0.0.1.
func TestClientOptionsTLS(t *testing.T) {
	certs := testkit.NewTLSCerts(t)
	tlsBroker := cluster(t, kfake.TLS(certs.ServerConfig(false)))
	mtlsBroker := cluster(t, kfake.TLS(certs.ServerConfig(true)))
	saslBroker := cluster(t, kfake.TLS(certs.ServerConfig(true)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "kstreamd", testPassword))
	pwFile := writeSecret(t, testPassword)
	wrongFile := writeSecret(t, "wrong-"+testPassword)
	client := fmt.Sprintf("\n    cert_file: %s\n    key_file: %s", certs.ClientCertFile, certs.ClientKeyFile)
	unknownAuthority := func(err error) bool {
		var e x509.UnknownAuthorityError
		return errors.As(err, &e)
	}
	hostname := func(err error) bool {
		var e x509.HostnameError
		return errors.As(err, &e)
	}
	for _, tc := range []struct {
		name    string
		brokers []string
		kafka   string
		failed  func(error) bool // nil: the round trip succeeds
	}{
		{"ca_file", tlsBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.CAFile, nil},
		{"without the CA", tlsBroker, "  tls:\n    enabled: true", unknownAuthority},
		{"another CA", tlsBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.OtherCAFile, unknownAuthority},
		{"plain text to a TLS broker", tlsBroker, "", func(err error) bool { return err != nil }},
		{"server_name in the certificate", tlsBroker, "  tls:\n    enabled: true\n    server_name: localhost\n    ca_file: " + certs.CAFile, nil},
		{"server_name not in the certificate", tlsBroker, "  tls:\n    enabled: true\n    server_name: kafka.example.com\n    ca_file: " + certs.CAFile, hostname},
		{"insecure_skip_verify", tlsBroker, "  tls:\n    enabled: true\n    insecure_skip_verify: true", nil},
		{"client certificate", mtlsBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.CAFile + client, nil},
		{"no client certificate", mtlsBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.CAFile,
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "certificate required") }},
		{"tls and SCRAM-SHA-512", saslBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.CAFile + client +
			"\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: kstreamd\n    password_file: " + pwFile, nil},
		{"tls and a wrong password", saslBroker, "  tls:\n    enabled: true\n    ca_file: " + certs.CAFile + client +
			"\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: kstreamd\n    password_file: " + wrongFile,
			func(err error) bool { return errors.Is(err, io.EOF) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseSecured(t, tc.brokers, tc.kafka)
			err := roundTrip(t, cfg)
			switch {
			case tc.failed == nil && err != nil:
				t.Fatalf("round trip: %v", err)
			case tc.failed != nil && !tc.failed(err):
				t.Fatalf("round trip = %v, want it to fail as the test expects", err)
			}
		})
	}
}

// TestClientOptionsNotValidated: a Config built in code that skipped
// Validate has nothing loaded, and its clients say so.
func TestClientOptionsNotValidated(t *testing.T) {
	certs := testkit.NewTLSCerts(t)
	tlsBroker := cluster(t, kfake.TLS(certs.ServerConfig(false)))
	saslBroker := cluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "kstreamd", testPassword))
	for name, c := range map[string]*Config{
		"tls":  {Kafka: KafkaConfig{Brokers: tlsBroker, ClientID: "x", TLS: TLSConfig{Enabled: true, CAFile: certs.CAFile}}},
		"sasl": {Kafka: KafkaConfig{Brokers: saslBroker, ClientID: "x", SASL: SASLConfig{Mechanism: SASLScramSHA256, Username: "kstreamd", PasswordEnv: "X"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := roundTrip(t, c); !errors.Is(err, ErrSecurityNotLoaded) {
				t.Fatalf("round trip = %v, want ErrSecurityNotLoaded", err)
			}
		})
	}
}

func TestClientOptionsCount(t *testing.T) {
	certs := testkit.NewTLSCerts(t)
	t.Setenv("KSTREAMD_TEST_PW", testPassword)
	for _, tc := range []struct {
		kafka string
		want  int
	}{
		{"", 2},
		{"  tls:\n    enabled: true\n    ca_file: " + certs.CAFile, 3},
		{"  sasl:\n    mechanism: PLAIN\n    username: u\n    password_env: KSTREAMD_TEST_PW", 3},
		{"  tls:\n    enabled: true\n  sasl:\n    mechanism: SCRAM-SHA-256\n    username: u\n    password_env: KSTREAMD_TEST_PW", 4},
	} {
		cfg := parseSecured(t, []string{"localhost:9092"}, tc.kafka)
		if got := len(cfg.ClientOptions()); got != tc.want {
			t.Errorf("%q: %d options, want %d (brokers, client id, tls, sasl)", tc.kafka, got, tc.want)
		}
	}
}

func TestLogSecurity(t *testing.T) {
	t.Setenv("KSTREAMD_TEST_PW", testPassword)
	tests := []struct {
		name, kafka string
		want        []string
	}{
		{"none", "", []string{
			"level=INFO msg=\"kafka client security\" tls=false client_certificate=false sasl_mechanism=none",
		}},
		{"insecure", "  tls:\n    enabled: true\n    insecure_skip_verify: true\n  sasl:\n    mechanism: SCRAM-SHA-512\n    username: u\n    password_env: KSTREAMD_TEST_PW", []string{
			"level=INFO msg=\"kafka client security\" tls=true client_certificate=false sasl_mechanism=SCRAM-SHA-512",
			"level=WARN msg=\"kafka.tls.insecure_skip_verify is true: broker certificates are not verified, so the connection can be intercepted\"",
		}},
		{"plain in clear", "  sasl:\n    mechanism: PLAIN\n    username: u\n    password_env: KSTREAMD_TEST_PW", []string{
			"level=INFO msg=\"kafka client security\" tls=false client_certificate=false sasl_mechanism=PLAIN",
			"level=WARN msg=\"kafka.sasl.mechanism PLAIN without kafka.tls: the password crosses the network in clear text\"",
		}},
		{"plain over tls", "  tls:\n    enabled: true\n  sasl:\n    mechanism: PLAIN\n    username: u\n    password_env: KSTREAMD_TEST_PW", []string{
			"level=INFO msg=\"kafka client security\" tls=true client_certificate=false sasl_mechanism=PLAIN",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseSecured(t, []string{"localhost:9092"}, tc.kafka)
			var buf bytes.Buffer
			cfg.LogSecurity(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			})))
			got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("log =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The client TLS config is TLS 1.2 or later and carries the loaded pieces.
func TestTLSConfigBuilt(t *testing.T) {
	certs := testkit.NewTLSCerts(t)
	cfg := parseSecured(t, []string{"localhost:9092"}, fmt.Sprintf(
		"  tls:\n    enabled: true\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n    server_name: kafka-1",
		certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile))
	tc := cfg.Kafka.TLS.tlsConfig()
	if tc.MinVersion != tls.VersionTLS12 || tc.ServerName != "kafka-1" || tc.InsecureSkipVerify ||
		tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Errorf("tls config: min %x server name %q insecure %v roots %v certificates %d",
			tc.MinVersion, tc.ServerName, tc.InsecureSkipVerify, tc.RootCAs != nil, len(tc.Certificates))
	}
	if out := fmt.Sprintf("%+v %#v", cfg.Kafka.TLS, cfg.Kafka.TLS); strings.Contains(out, "PrivateKey") {
		t.Errorf("the TLS config prints its key: %s", out)
	}
}
