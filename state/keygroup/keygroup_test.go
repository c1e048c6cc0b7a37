package keygroup

import "testing"

func TestDefaultMaxParallelism(t *testing.T) {
	for _, tc := range []struct{ p, want int }{
		{1, 128}, {2, 128}, {85, 128}, {86, 256}, {100, 256}, {1000, 2048}, {30000, 32768},
	} {
		if got := DefaultMaxParallelism(tc.p); got != tc.want {
			t.Errorf("DefaultMaxParallelism(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
}

func TestRangeForInvertsOperatorIndex(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 1000} {
		for p := 1; p <= min(maxP, 13); p++ {
			next := 0
			for i := 0; i < p; i++ {
				r := RangeFor(maxP, p, i)
				if r.Start != next {
					t.Fatalf("maxP=%d p=%d i=%d: range %v does not start at %d", maxP, p, i, r, next)
				}
				for kg := r.Start; kg <= r.End; kg++ {
					if got := OperatorIndex(kg, maxP, p); got != i {
						t.Fatalf("maxP=%d p=%d: OperatorIndex(%d) = %d, want %d", maxP, p, kg, got, i)
					}
				}
				next = r.End + 1
			}
			if next != maxP {
				t.Fatalf("maxP=%d p=%d: ranges cover [0,%d), want [0,%d)", maxP, p, next, maxP)
			}
		}
	}
}

func TestAssignIsStable(t *testing.T) {
	// Golden values: the hash is part of the checkpoint format and must not change.
	for _, tc := range []struct {
		key  string
		want int
	}{{"blue", 55}, {"red", 106}, {"green", 69}, {"yellow", 83}} {
		if got := Assign([]byte(tc.key), 128); got != tc.want {
			t.Errorf("Assign(%q, 128) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if got, want := Hash([]byte("")), uint64(0xef46db3751d8e999); got != want {
		t.Fatalf("Hash(\"\") = %#x, want xxhash64 of empty input %#x", got, want)
	}
	if got, want := Hash([]byte("abc")), uint64(0x44bc2cf5ad770999); got != want {
		t.Fatalf("Hash(\"abc\") = %#x, want %#x", got, want)
	}
}

func TestValidateMaxParallelism(t *testing.T) {
	if err := ValidateMaxParallelism(128, 2); err != nil {
		t.Fatal(err)
	}
	if err := ValidateMaxParallelism(2, 4); err == nil {
		t.Fatal("parallelism above max parallelism accepted")
	}
	if err := ValidateMaxParallelism(0, 1); err == nil {
		t.Fatal("max parallelism 0 accepted")
	}
}
