package graph

import "testing"

func TestTopicDesc(t *testing.T) {
	for _, c := range []struct {
		s    Source
		want string
	}{
		{Source{Topic: "items"}, "items"},
		{Source{Topics: []string{"a", "b"}}, "a,b"},
		{Source{TopicPattern: "orders-.*"}, "pattern:orders-.*"},
	} {
		if got := c.s.TopicDesc(); got != c.want {
			t.Errorf("%+v: TopicDesc() = %q, want %q", c.s, got, c.want)
		}
	}
}
