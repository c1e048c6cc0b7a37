package pipeline

import (
	"fmt"

	"github.com/kstreamd/kstreamd/sink/pgsink"
)

// validatePostgresSinks checks what a postgres sink's params cannot check
// alone (pgsink.Params.CheckParams does the rest): mode insert needs an
// append-only input (a changelog's -D and +U need upsert's key columns);
// an exactly-once sink's transaction ids "<job>:<uid>-<subtask>-<id>"
// must fit PostgreSQL's 199 bytes, and it does not run in cluster mode,
// where each unit's restore would roll back the prepared transactions of
// the other units.
func (c *Config) validatePostgresSinks(v *validator) {
	for i, s := range c.Sinks {
		if s.Type != pgsink.Type {
			continue
		}
		p := fmt.Sprintf("sinks[%d]", i)
		pp, ok := c.connParams[s.Name].(*pgsink.Params)
		if !ok {
			continue // its params did not decode: reported there
		}
		if pp.Mode == pgsink.ModeInsert || (pp.Mode == "" && len(pp.KeyColumns) == 0) {
			if kind, origin := c.changelogStream(s.Input); kind != appendOnly {
				v.errorf(p+".params.mode", "mode insert appends rows, but %s; use mode upsert with key_columns (+I and +U upsert, -D deletes by key)", origin)
			}
		}
		if !s.Delivery.ExactlyOnce() {
			continue
		}
		if c.Cluster.Enabled {
			v.errorf(p+".delivery", "an exactly-once postgres sink does not run in cluster mode: each unit's restore would roll back the prepared transactions of the other units; use at-least-once (idempotent upserts)")
		}
		field, uid := p+".name", s.Name
		if s.UID != "" {
			field, uid = p+".uid", s.UID
		}
		if n := len(pgsink.GIDPrefix(c.Job.Name, uid)); n > pgsink.MaxGIDPrefix {
			v.errorf(field, "job name and sink uid too long for PostgreSQL transaction ids: %q is %d bytes, at most %d", pgsink.GIDPrefix(c.Job.Name, uid), n, pgsink.MaxGIDPrefix)
		}
	}
}
