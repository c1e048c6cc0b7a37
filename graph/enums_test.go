package graph

import (
	"slices"
	"testing"
)

func TestFormats(t *testing.T) {
	var got []string
	for _, f := range Formats() {
		if !f.Valid() {
			t.Errorf("%q not Valid", f)
		}
		got = append(got, f.String())
	}
	if want := []string{"json", "string", "bytes"}; !slices.Equal(got, want) {
		t.Fatalf("Formats = %q, want %q (the config spellings, in message order)", got, want)
	}
	if DefaultFormat != FormatJSON {
		t.Fatalf("DefaultFormat = %q, want json", DefaultFormat)
	}
	for _, f := range []Format{"", "JSON", "avro"} {
		if f.Valid() {
			t.Errorf("%q Valid, want not", f)
		}
	}
}

func TestDeliveries(t *testing.T) {
	var got []string
	for _, d := range Deliveries() {
		if !d.Valid() {
			t.Errorf("%q not Valid", d)
		}
		if d.ExactlyOnce() != (d == DeliveryExactlyOnce) {
			t.Errorf("%q.ExactlyOnce() = %v", d, d.ExactlyOnce())
		}
		got = append(got, d.String())
	}
	if want := []string{"exactly-once", "at-least-once", "none"}; !slices.Equal(got, want) {
		t.Fatalf("Deliveries = %q, want %q (the config spellings, in message order)", got, want)
	}
	if DefaultDelivery != DeliveryAtLeastOnce {
		t.Fatalf("DefaultDelivery = %q, want at-least-once", DefaultDelivery)
	}
	for _, d := range []Delivery{"", "exactly_once", "EXACTLY-ONCE"} {
		if d.Valid() || d.ExactlyOnce() {
			t.Errorf("%q Valid or ExactlyOnce, want neither", d)
		}
	}
}
