package sdk

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/state"
)

// stateQueryTimeout bounds how long GET /api/v1/state waits for the owning
// subtask to answer (it answers between two records).
const stateQueryTimeout = 10 * time.Second

// StateErrorResponse is the body of a refused GET
// /api/v1/state/{operator}/{state}: what went wrong, and for a 404 what
// exists instead (Operators: the operators with keyed state; States: the
// states of the operator), for a 409 in cluster mode the member holding
// the key's unit.
type StateErrorResponse struct {
	Error     string   `json:"error"`
	Operators []string `json:"operators,omitempty"`
	States    []string `json:"states,omitempty"`
	// Unit, Owner and OwnerHost: cluster mode, the unit owning the key and
	// the member (and the host its Kafka client connects from) holding
	// it; Owner is empty when the group could not tell.
	Unit      *job.UnitID `json:"unit,omitempty"`
	Owner     string      `json:"owner,omitempty"`
	OwnerHost string      `json:"owner_host,omitempty"`
}

// errOpenState is the answer (403) of a state read on a listener that is
// not loopback when no bearer token is configured.
const errOpenState = "state reads are refused: the API listens on a non-loopback address without a bearer token, and keyed state is the job's data; " +
	"set metrics.bearer_token_env or metrics.bearer_token_file, or metrics.allow_unauthenticated_control: true"

// stateReads wraps the state query handler with the token rule of the
// API (authorized: 401 without the configured token) and, as for the
// mutating endpoints (control), refuses it with 403 on a listener that is
// not loopback when no token is configured and
// metrics.allow_unauthenticated_control is not set: keyed state is the
// job's data, not its status.
func (s *server) stateReads(h http.HandlerFunc) http.HandlerFunc {
	return s.authorized(func(w http.ResponseWriter, r *http.Request) {
		if s.controlRefused() {
			writeJSON(w, http.StatusForbidden, StateErrorResponse{Error: errOpenState})
			return
		}
		h(w, r)
	})
}

// stateKeyParam returns the key of a state query: the query parameter key
// (the key's string form: a string key's characters, a number's JSON
// text, a composite key_by expression's string result) or key_base64 (the
// key's bytes in standard base64, for a key that is not text), exactly one
// of them.
func stateKeyParam(r *http.Request) ([]byte, string) {
	q := r.URL.Query()
	k, hasKey := q["key"]
	b, hasB64 := q["key_base64"]
	switch {
	case hasKey && hasB64, len(k) > 1, len(b) > 1:
		return nil, "give the key once, as key or as key_base64"
	case hasKey:
		return []byte(k[0]), ""
	case hasB64:
		key, err := base64.StdEncoding.DecodeString(b[0])
		if err != nil {
			return nil, "key_base64 is not standard base64: " + err.Error()
		}
		return key, ""
	}
	return nil, "missing the key: ?key=<the key as key_by selects it> or ?key_base64=<its bytes in base64>"
}

// queryState answers GET /api/v1/state/{operator}/{state}?key=...: the
// key's current state in that operator, read by the subtask owning it
// (job.Job.QueryState; in cluster mode job.Member.QueryState, 409 when
// another member holds the key's unit).
func (s *server) queryState(w http.ResponseWriter, r *http.Request) {
	key, problem := stateKeyParam(r)
	if problem != "" {
		writeJSON(w, http.StatusBadRequest, StateErrorResponse{Error: problem})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), stateQueryTimeout)
	defer cancel()
	op, name := r.PathValue("operator"), r.PathValue("state")
	var ans job.StateAnswer
	var err error
	if m := s.currentMember(); m != nil {
		ans, err = m.QueryState(ctx, op, name, key)
	} else if j, _ := s.current(); j != nil {
		ans, err = j.QueryState(ctx, op, name, key)
	} else {
		writeJSON(w, http.StatusServiceUnavailable, StateErrorResponse{Error: s.notRunning()})
		return
	}
	var (
		uo  *job.UnknownOperatorError
		us  *state.UnknownStateError
		no  *job.NotOwnerError
		kge *state.KeyGroupError
	)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, ans)
	case errors.As(err, &uo):
		writeJSON(w, http.StatusNotFound, StateErrorResponse{Error: err.Error(), Operators: uo.Keyed})
	case errors.As(err, &us):
		writeJSON(w, http.StatusNotFound, StateErrorResponse{Error: err.Error(), States: append([]string{}, us.Known...)})
	case errors.As(err, &no):
		writeJSON(w, http.StatusConflict, StateErrorResponse{Error: err.Error(), Unit: &no.Unit, Owner: no.Owner, OwnerHost: no.Host})
	case errors.As(err, &kge):
		// A key group no subtask here owns: a unit's job in cluster mode
		// that lost the unit meanwhile.
		writeJSON(w, http.StatusConflict, StateErrorResponse{Error: err.Error()})
	case errors.Is(err, job.ErrNotRunning):
		writeJSON(w, http.StatusServiceUnavailable, StateErrorResponse{Error: err.Error()})
	case errors.Is(err, context.DeadlineExceeded):
		writeJSON(w, http.StatusGatewayTimeout, StateErrorResponse{Error: err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, StateErrorResponse{Error: err.Error()})
	}
}
