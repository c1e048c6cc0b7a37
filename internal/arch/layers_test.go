package arch

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kstreamd/kstreamd/"

// allowed lists, per package, the project packages its non-test files may
// import (STYLE.md section 1). internal/ helpers are wired only by cmd,
// except internal/kafkaretry, the retry of transient broker errors that
// source, sink and job share, and internal/atomicfile, the leaf every
// package from state up (and the embedded broker) writes files with.
var allowed = map[string][]string{
	"state/keygroup":      {},
	"runtime":             {"state/keygroup"},
	"state":               {"runtime", "state/keygroup", "internal/atomicfile"},
	"checkpoint":          {"state", "runtime", "state/keygroup", "internal/atomicfile"},
	"checkpoint/s3store":  {"checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"source":              {"checkpoint", "state", "runtime", "state/keygroup", "internal/kafkaretry", "internal/atomicfile"},
	"sink":                {"checkpoint", "state", "runtime", "state/keygroup", "internal/kafkaretry", "internal/atomicfile"},
	"sink/filesink":       {"checkpoint/s3store", "connector", "graph", "operators", "expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"sink/pgsink":         {"connector", "graph", "operators", "expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"broadcast":           {"state", "runtime", "state/keygroup", "internal/atomicfile"},
	"expression":          {},
	"srformat":            {"connector", "graph", "operators", "expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"operators":           {"expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"pipeline":            {"job", "srformat", "connector", "sink/filesink", "sink/pgsink", "checkpoint/s3store", "graph", "operators", "expression", "broadcast", "source", "sink", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"internal/demo":       {},
	"internal/kafkaretry": {},
	"internal/atomicfile": {},
	"internal/embedded":   {"internal/atomicfile"},
	"internal/testkit":    {},
	"internal/arch":       {},
	"internal/bench":      {"configs/nexmark", "internal/embedded", "pipeline", "job", "srformat", "connector", "sink/pgsink", "graph", "operators", "expression", "broadcast", "source", "sink", "checkpoint", "state", "runtime", "state/keygroup", "internal/kafkaretry", "internal/atomicfile"},
	"connector":           {"graph", "operators", "expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"graph":               {"operators", "expression", "broadcast", "checkpoint", "state", "runtime", "state/keygroup", "internal/atomicfile"},
	"job":                 {"srformat", "connector", "sink/filesink", "sink/pgsink", "checkpoint/s3store", "graph", "operators", "expression", "broadcast", "source", "sink", "checkpoint", "state", "runtime", "state/keygroup", "internal/kafkaretry", "internal/atomicfile"},
	"sdk":                 {"pipeline", "job", "srformat", "connector", "sink/pgsink", "graph", "operators", "expression", "broadcast", "checkpoint", "checkpoint/s3store", "state", "runtime", "state/keygroup", "internal/demo", "internal/embedded", "internal/bench", "internal/atomicfile"},
	"cmd/kstreamd":        {"sdk", "operators"},
	"deploy":              {},
	"configs/nexmark":     {},
}

func TestLayering(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && path != root {
			if _, serr := os.Stat(filepath.Join(path, "go.mod")); serr == nil {
				return filepath.SkipDir // another module (examples/custom-operator): not ours to layer
			}
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if strings.Contains(rel, "testdata") {
			return nil
		}
		ok, known := allowed[rel]
		if !known {
			t.Errorf("package %s is not in the layering table; add it to allowed", rel)
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if dep, ours := strings.CutPrefix(p, module); ours && !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s, which is not below it", filepath.Base(path)+" ("+rel+")", dep)
			}
			if rel != "cmd/kstreamd" && rel != "internal/embedded" && strings.Contains(p, "franz-go/pkg/kfake") {
				t.Errorf("%s (%s) imports kfake; only the embedded broker may", filepath.Base(path), rel)
			}
			if rel != "internal/embedded" && strings.Contains(p, "franz-go/pkg/sr/srfake") {
				t.Errorf("%s (%s) imports srfake; only the embedded schema registry may", filepath.Base(path), rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 40 {
		t.Fatalf("checked only %d files; the walk missed the tree", seen)
	}
}
