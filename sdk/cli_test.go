package sdk

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHelp checks that every command and sub-command prints its usage to
// stdout on --help (and -h) and exits 0, and that a bad flag prints it to
// stderr and exits 2.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		first string // the usage's first line
		flags []string
	}{
		{[]string{"--help"}, "usage: kstreamd <command> [flags]", nil},
		{[]string{"-h"}, "usage: kstreamd <command> [flags]", nil},
		{[]string{"help"}, "usage: kstreamd <command> [flags]", nil},
		{[]string{"run", "--help"}, "usage: kstreamd run --config FILE [--from-savepoint DIR] [--allow-non-restored-state] [--cpuprofile FILE]", []string{"-config FILE", "-from-savepoint DIR", "-allow-non-restored-state", "-cpuprofile FILE"}},
		{[]string{"run", "-h"}, "usage: kstreamd run --config FILE [--from-savepoint DIR] [--allow-non-restored-state] [--cpuprofile FILE]", []string{"-config FILE"}},
		{[]string{"validate", "--help"}, "usage: kstreamd validate --config FILE", []string{"-config FILE"}},
		{[]string{"savepoint", "--help"}, "usage: kstreamd savepoint [--address HOST:PORT] [--dir DIR] [--stop] [--token-env NAME | --token-file FILE]",
			[]string{"-address string", "-dir DIR", "-stop", "-token-env NAME", "-token-file FILE"}},
		{[]string{"checkpoints", "--help"}, "usage: kstreamd checkpoints <command> [flags]", []string{"list --dir DIR"}},
		{[]string{"checkpoints", "-h"}, "usage: kstreamd checkpoints <command> [flags]", nil},
		{[]string{"checkpoints", "list", "--help"}, "usage: kstreamd checkpoints list --dir DIR", []string{"-dir DIR"}},
		{[]string{"state", "--help"}, "usage: kstreamd state <command> [flags] DIR", []string{"ls [--json] DIR", "dump [filters] DIR", "count [filters] DIR"}},
		{[]string{"state", "ls", "--help"}, "usage: kstreamd state ls [--config FILE] [--json] DIR", []string{"-json", "-config FILE"}},
		{[]string{"state", "dump", "--help"}, "usage: kstreamd state dump [--config FILE] [--operator NAME] [--state NAME] [--key-group N] [--key KEY] DIR", []string{"-config FILE", "-operator NAME", "-state NAME", "-key-group N", "-key KEY"}},
		{[]string{"state", "count", "-h"}, "usage: kstreamd state count [--config FILE] [--operator NAME] [--state NAME] [--key-group N] [--key KEY] DIR", nil},
		{[]string{"broker", "--help"}, "usage: kstreamd broker --config FILE [--force-unclean]", []string{"-config FILE", "-force-unclean"}},
		{[]string{"version", "--help"}, "usage: kstreamd version", nil},
		{[]string{"bench", "--help"}, "usage: kstreamd bench [--scenario NAME | --all] [flags]", []string{"-scenario NAME", "-records N"}},
		{[]string{"bench", "-h"}, "usage: kstreamd bench [--scenario NAME | --all] [flags]", nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Run(context.Background(), tc.args, &stdout, &stderr, NewRegistry())
			if code != 0 || stderr.Len() > 0 || !strings.HasPrefix(stdout.String(), tc.first+"\n") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and stdout starting %q", code, stdout.String(), stderr.String(), tc.first)
			}
			for _, f := range tc.flags {
				if !strings.Contains(stdout.String(), f) {
					t.Errorf("usage lacks %q:\n%s", f, stdout.String())
				}
			}
		})
	}
	for _, args := range [][]string{{"run", "--bogus"}, {"checkpoints"}, {"checkpoints", "lsit"}, {"checkpoints", "list"}, {"savepoint", "-x"}, {"version", "extra"}} {
		var stdout, stderr strings.Builder
		if code := Run(context.Background(), args, &stdout, &stderr, NewRegistry()); code != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), "usage: kstreamd ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestVersion checks `kstreamd version` and `--version` print the same
// text, and what versionText makes of build information.
func TestVersion(t *testing.T) {
	var a, b, errs strings.Builder
	if Run(context.Background(), []string{"version"}, &a, &errs, NewRegistry()) != 0 ||
		Run(context.Background(), []string{"--version"}, &b, &errs, NewRegistry()) != 0 || errs.Len() > 0 {
		t.Fatalf("version: stderr %q", errs.String())
	}
	if a.String() != b.String() || !strings.HasPrefix(a.String(), "kstreamd "+Version+"\n") {
		t.Fatalf("version printed %q, --version %q", a.String(), b.String())
	}
	main := debug.Module{Path: "github.com/kstreamd/kstreamd", Version: "v1.4.0"}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "kstreamd dev\nmodule unknown (no build information)\n"},
		{"tagged, clean", &debug.BuildInfo{GoVersion: "go1.26.0", Main: main, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "6c10f32abc"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"},
		}}, "kstreamd dev\nmodule github.com/kstreamd/kstreamd v1.4.0\nrevision 6c10f32abc (2026-01-02T03:04:05Z)\ngo1.26.0\n"},
		{"devel, modified", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/kstreamd/kstreamd", Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "6c10f32abc"}, {Key: "vcs.modified", Value: "true"},
		}}, "kstreamd dev\nmodule github.com/kstreamd/kstreamd (devel)\nrevision 6c10f32abc modified\ngo1.26.0\n"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.0", Main: main}, "kstreamd dev\nmodule github.com/kstreamd/kstreamd v1.4.0\nrevision unknown (built without VCS information)\ngo1.26.0\n"},
		{"sdk in another module", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/mydaemon", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "github.com/kstreamd/kstreamd", Version: "v1.4.0"}}},
			"kstreamd dev\nmodule example.com/mydaemon (devel)\nkstreamd module github.com/kstreamd/kstreamd v1.4.0\nrevision unknown (built without VCS information)\ngo1.26.0\n"},
	} {
		if got := versionText("dev", tc.bi); got != tc.want {
			t.Errorf("%s: versionText =\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}
