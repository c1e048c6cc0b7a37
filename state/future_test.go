package state

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
)

var errBoom = errors.New("boom")

// outcome reads a future's outcome without blocking; done is false while it
// is pending.
func outcome[T any](f StateFuture[T]) (v T, err error, done bool) {
	f.subscribe(func(x T, e error) { v, err, done = x, e, true })
	return v, err, done
}

// pending returns an incomplete detached future and its completer.
func pending[T any]() (*future[T], func(T, error)) {
	f := newFuture[T](nil)
	return f, f.complete
}

func TestThenApply(t *testing.T) {
	tests := []struct {
		name    string
		src     StateFuture[int]
		fn      func(int) (string, error)
		want    string
		wantErr error
	}{
		{"value", CompletedFuture(41), func(v int) (string, error) { return strconv.Itoa(v + 1), nil }, "42", nil},
		{"fn error", CompletedFuture(1), func(int) (string, error) { return "", errBoom }, "", errBoom},
		{"source error skips fn", failedFuture[int](nil, errBoom), func(int) (string, error) { panic("must not run") }, "", errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err, done := outcome(ThenApply(tt.src, tt.fn))
			if !done || got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Fatalf("got (%q, %v, done=%v), want (%q, %v, done)", got, err, done, tt.want, tt.wantErr)
			}
		})
	}
}

func TestThenApplyWaitsForCompletion(t *testing.T) {
	src, complete := pending[int]()
	var ran []string
	r := ThenApply(StateFuture[int](src), func(v int) (int, error) { ran = append(ran, "apply"); return v * 2, nil })
	a := r.ThenAccept(func(v int) error { ran = append(ran, "accept "+strconv.Itoa(v)); return nil })
	if _, _, done := outcome(a); done || len(ran) != 0 {
		t.Fatalf("completed before the source: ran %v", ran)
	}
	complete(21, nil)
	if _, err, done := outcome(a); !done || err != nil {
		t.Fatalf("after completion: done=%v err=%v", done, err)
	}
	if want := []string{"apply", "accept 42"}; !reflect.DeepEqual(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}

func TestThenAccept(t *testing.T) {
	tests := []struct {
		name    string
		src     StateFuture[int]
		action  func(int) error
		wantErr error
		wantSaw []int
	}{
		{"consumes", CompletedFuture(7), nil, nil, []int{7}},
		{"action error", CompletedFuture(7), func(int) error { return errBoom }, errBoom, nil},
		{"source error", failedFuture[int](nil, errBoom), nil, errBoom, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var saw []int
			action := tt.action
			if action == nil {
				action = func(v int) error { saw = append(saw, v); return nil }
			}
			_, err, done := outcome(tt.src.ThenAccept(action))
			if !done || !errors.Is(err, tt.wantErr) || !reflect.DeepEqual(saw, tt.wantSaw) {
				t.Fatalf("got (err %v, done %v, saw %v), want (%v, %v)", err, done, saw, tt.wantErr, tt.wantSaw)
			}
		})
	}
}

func TestThenCompose(t *testing.T) {
	inner, completeInner := pending[string]()
	tests := []struct {
		name     string
		src      StateFuture[int]
		fn       func(int) (StateFuture[string], error)
		complete func()
		want     string
		wantErr  error
	}{
		{"completed inner", CompletedFuture(3), func(v int) (StateFuture[string], error) { return CompletedFuture(strconv.Itoa(v)), nil }, nil, "3", nil},
		{"pending inner", CompletedFuture(3), func(int) (StateFuture[string], error) { return inner, nil }, func() { completeInner("later", nil) }, "later", nil},
		{"inner fails", CompletedFuture(3), func(int) (StateFuture[string], error) { return failedFuture[string](nil, errBoom), nil }, nil, "", errBoom},
		{"fn error", CompletedFuture(3), func(int) (StateFuture[string], error) { return nil, errBoom }, nil, "", errBoom},
		{"nil future", CompletedFuture(3), func(int) (StateFuture[string], error) { return nil, nil }, nil, "", errNilFuture},
		{"source error", failedFuture[int](nil, errBoom), func(int) (StateFuture[string], error) { panic("must not run") }, nil, "", errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ThenCompose(tt.src, tt.fn)
			if tt.complete != nil {
				if _, _, done := outcome(r); done {
					t.Fatal("done before the inner future")
				}
				tt.complete()
			}
			got, err, done := outcome(r)
			if !done || got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Fatalf("got (%q, %v, done=%v), want (%q, %v)", got, err, done, tt.want, tt.wantErr)
			}
		})
	}
}

func TestThenCombine(t *testing.T) {
	concat := func(a int, b string) (string, error) { return fmt.Sprint(a, b), nil }
	tests := []struct {
		name    string
		order   []string // which side completes first: "f", "g"
		fErr    error
		gErr    error
		fn      func(int, string) (string, error)
		want    string
		wantErr error
	}{
		{"f then g", []string{"f", "g"}, nil, nil, concat, "1x", nil},
		{"g then f", []string{"g", "f"}, nil, nil, concat, "1x", nil},
		{"f fails", []string{"f", "g"}, errBoom, nil, concat, "", errBoom},
		{"g fails first", []string{"g", "f"}, nil, errBoom, concat, "", errBoom},
		{"fn error", []string{"f", "g"}, nil, nil, func(int, string) (string, error) { return "", errBoom }, "", errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, cf := pending[int]()
			g, cg := pending[string]()
			r := ThenCombine(StateFuture[int](f), StateFuture[string](g), tt.fn)
			for i, side := range tt.order {
				if _, _, done := outcome(r); done && tt.fErr == nil && tt.gErr == nil {
					t.Fatalf("done after %d of 2 sides", i)
				}
				if side == "f" {
					cf(1, tt.fErr)
				} else {
					cg("x", tt.gErr)
				}
			}
			got, err, done := outcome(r)
			if !done || got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Fatalf("got (%q, %v, done=%v), want (%q, %v)", got, err, done, tt.want, tt.wantErr)
			}
		})
	}
}

func TestThenConditionally(t *testing.T) {
	even := func(v int) (bool, error) { return v%2 == 0, nil }
	badCond := func(int) (bool, error) { return false, errBoom }
	tests := []struct {
		name      string
		in        int
		cond      func(int) (bool, error)
		nilFalse  bool // no action on false
		failTrue  bool // the true action fails
		wantCond  bool
		wantValue string
		wantRan   string
		wantErr   error
	}{
		{"true branch", 4, even, false, false, true, "even 4", "true", nil},
		{"false branch", 3, even, false, false, false, "odd 3", "false", nil},
		{"false without action", 3, even, true, false, false, "", "", nil},
		{"condition error", 4, badCond, false, false, false, "", "", errBoom},
		{"action error", 4, even, false, true, true, "", "true", errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, variant := range []string{"accept", "apply", "compose"} {
				t.Run(variant, func(t *testing.T) {
					var ran string
					act := func(branch, prefix string) func(int) (string, error) {
						return func(v int) (string, error) {
							ran = branch
							if tt.failTrue && branch == "true" {
								return "", errBoom
							}
							return fmt.Sprint(prefix, " ", v), nil
						}
					}
					ifTrue, ifFalse := act("true", "even"), act("false", "odd")
					if tt.nilFalse {
						ifFalse = nil
					}
					src := CompletedFuture(tt.in)
					var (
						gotCond  bool
						gotValue string
						err      error
						done     bool
					)
					switch variant {
					case "accept":
						accept := func(a func(int) (string, error)) func(int) error {
							if a == nil {
								return nil
							}
							return func(v int) error { _, err := a(v); return err }
						}
						gotCond, err, done = outcome(ThenConditionallyAccept(src, tt.cond, accept(ifTrue), accept(ifFalse)))
						gotValue = tt.wantValue // accept carries no value
					case "apply":
						var b Branch[string]
						b, err, done = outcome(ThenConditionallyApply(src, tt.cond, ifTrue, ifFalse))
						gotCond, gotValue = b.Cond, b.Value
					case "compose":
						compose := func(a func(int) (string, error)) func(int) (StateFuture[string], error) {
							if a == nil {
								return nil
							}
							return func(v int) (StateFuture[string], error) {
								s, err := a(v)
								if err != nil {
									return failedFuture[string](nil, err), nil
								}
								return CompletedFuture(s), nil
							}
						}
						var b Branch[string]
						b, err, done = outcome(ThenConditionallyCompose(src, tt.cond, compose(ifTrue), compose(ifFalse)))
						gotCond, gotValue = b.Cond, b.Value
					}
					if !done || !errors.Is(err, tt.wantErr) || ran != tt.wantRan {
						t.Fatalf("got (done %v, err %v, ran %q), want (err %v, ran %q)", done, err, ran, tt.wantErr, tt.wantRan)
					}
					if err == nil && (gotCond != tt.wantCond || gotValue != tt.wantValue) {
						t.Fatalf("got (%v, %q), want (%v, %q)", gotCond, gotValue, tt.wantCond, tt.wantValue)
					}
				})
			}
		})
	}
}

func TestCombineAll(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		order   []int // completion order of the pending futures
		failAt  int   // index that fails, -1 for none
		want    []int
		wantErr error
	}{
		{"empty", 0, nil, -1, []int{}, nil},
		{"in order", 3, []int{0, 1, 2}, -1, []int{0, 10, 20}, nil},
		{"reverse order keeps input order", 3, []int{2, 1, 0}, -1, []int{0, 10, 20}, nil},
		{"one fails", 3, []int{0, 1, 2}, 1, nil, errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := make([]StateFuture[int], tt.n)
			completers := make([]func(int, error), tt.n)
			for i := range fs {
				f, c := pending[int]()
				fs[i], completers[i] = f, c
			}
			r := CombineAll(fs)
			for k, i := range tt.order {
				if _, _, done := outcome(r); done {
					t.Fatalf("done after %d of %d", k, tt.n)
				}
				var err error
				if i == tt.failAt {
					err = errBoom
				}
				completers[i](i*10, err)
				if err != nil {
					break
				}
			}
			got, err, done := outcome(r)
			if !done || !errors.Is(err, tt.wantErr) || (err == nil && !reflect.DeepEqual(got, tt.want)) {
				t.Fatalf("got (%v, %v, done=%v), want (%v, %v)", got, err, done, tt.want, tt.wantErr)
			}
		})
	}
}

func TestStateIterator(t *testing.T) {
	tests := []struct {
		name      string
		elems     []string
		failOn    string
		wantEmpty bool
		wantSeen  []string
		wantErr   error
	}{
		{"empty", nil, "", true, nil, nil},
		{"all in order", []string{"a", "b", "c"}, "", false, []string{"a", "b", "c"}, nil},
		{"error stops", []string{"a", "b", "c"}, "b", false, []string{"a", "b"}, errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := newStateIterator(nil, tt.elems)
			if it.IsEmpty() != tt.wantEmpty {
				t.Fatalf("IsEmpty = %v, want %v", it.IsEmpty(), tt.wantEmpty)
			}
			var seen []string
			_, err, done := outcome(it.OnNext(func(s string) error {
				seen = append(seen, s)
				if s == tt.failOn {
					return errBoom
				}
				return nil
			}))
			if !done || !errors.Is(err, tt.wantErr) || !reflect.DeepEqual(seen, tt.wantSeen) {
				t.Fatalf("got (%v, %v, done=%v), want (%v, %v)", seen, err, done, tt.wantSeen, tt.wantErr)
			}
			all, err, done := outcome(ToIterable(CompletedFuture(it)))
			if !done || err != nil || len(all) != len(tt.elems) || (len(all) > 0 && !reflect.DeepEqual(all, tt.elems)) {
				t.Fatalf("ToIterable = (%v, %v, done=%v), want %v", all, err, done, tt.elems)
			}
		})
	}
}

func TestOnNextCompose(t *testing.T) {
	p, complete := pending[int]()
	tests := []struct {
		name     string
		elems    []int
		fn       func(int) (StateFuture[int], error)
		complete func()
		want     []int
		wantErr  error
	}{
		{"completed", []int{1, 2, 3}, func(v int) (StateFuture[int], error) { return CompletedFuture(v * v), nil }, nil, []int{1, 4, 9}, nil},
		{"pending element", []int{1, 2}, func(v int) (StateFuture[int], error) {
			if v == 2 {
				return p, nil
			}
			return CompletedFuture(v), nil
		}, func() { complete(20, nil) }, []int{1, 20}, nil},
		{"fn error", []int{1, 2}, func(int) (StateFuture[int], error) { return nil, errBoom }, nil, nil, errBoom},
		{"empty", nil, func(int) (StateFuture[int], error) { panic("must not run") }, nil, []int{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := OnNextCompose(newStateIterator(nil, tt.elems), tt.fn)
			if tt.complete != nil {
				if _, _, done := outcome(r); done {
					t.Fatal("done before the element future")
				}
				tt.complete()
			}
			got, err, done := outcome(r)
			if !done || !errors.Is(err, tt.wantErr) || (err == nil && !reflect.DeepEqual(got, tt.want)) {
				t.Fatalf("got (%v, %v, done=%v), want (%v, %v)", got, err, done, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCompletedVoidFuture(t *testing.T) {
	v, err, done := outcome(CompletedVoidFuture())
	if !done || err != nil || v != (Void{}) {
		t.Fatalf("got (%v, %v, done=%v)", v, err, done)
	}
}
