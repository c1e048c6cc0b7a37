package connector

import (
	"errors"
	"io"
	"sync"
)

// Resources are objects every connector and format of a job shares: one
// Kafka client setup, one Schema Registry client with its schema cache.
// Each is made once, on first use, by the open function of the first Get
// of its key. Safe for concurrent use.
type Resources struct {
	mu    sync.Mutex
	m     map[any]any
	order []any
}

// NewResources returns an empty set.
func NewResources() *Resources { return &Resources{m: map[any]any{}} }

// Get returns the resource of key, making it with open on first use (an
// error from open is returned and nothing is kept, so the next Get tries
// again). Keys should be values of an unexported type of the package that
// owns the resource, as context keys are.
func (r *Resources) Get(key any, open func() (any, error)) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.m[key]; ok {
		return v, nil
	}
	v, err := open()
	if err != nil {
		return nil, err
	}
	r.m[key] = v
	r.order = append(r.order, key)
	return v, nil
}

// Set sets the resource of key, replacing any.
func (r *Resources) Set(key, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[key]; !ok {
		r.order = append(r.order, key)
	}
	r.m[key] = v
}

// Close closes every resource that is an io.Closer, newest first, and
// forgets them all; it returns their errors joined.
func (r *Resources) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for i := len(r.order) - 1; i >= 0; i-- {
		if c, ok := r.m[r.order[i]].(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	r.m, r.order = map[any]any{}, nil
	return errors.Join(errs...)
}
