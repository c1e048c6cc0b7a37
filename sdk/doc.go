// Package sdk is what a Go user imports to run kstreamd jobs with operator
// types of their own: the kstreamd command line (Main, Run) over a
// registry of operator, source, sink and format types (NewRegistry holds
// the built-ins; Register, RegisterSource, RegisterSink and RegisterFormat
// add more),
// and the function interfaces and helpers a custom operator implements. A
// binary built with it has the commands, flags, HTTP API and metrics of
// kstreamd itself; its pipelines name the registered types in YAML.
//
//	kstreamd run --config FILE [--from-savepoint DIR]   run the job until SIGINT or SIGTERM
//	kstreamd validate --config FILE                     check the file and exit
//	kstreamd savepoint [--address A] [--dir D] [--stop] [--token-env NAME | --token-file FILE]
//	                                                    ask a running daemon for a savepoint
//	kstreamd checkpoints list --dir DIR                 list a job's checkpoints
//	kstreamd broker --config FILE [--force-unclean]     run the development broker on its own
//	kstreamd version                                    print the version and VCS revision
//
// Every command prints its usage with --help and exits 0.
//
// Exit status: 0 after a clean stop or a valid file, 1 when the job (or a
// command) fails, 2 for a bad command line or config file.
//
// # Usage
//
// An operator type is a Factory: its name, its traits, a params struct
// (decoded strictly from the operator's params: mapping by its yaml tags,
// every problem a config error at its FILE:LINE:COL; ParamsChecker adds
// rules beyond types) and a constructor returning one function per
// subtask: a ProcessFunction for a stream that is not keyed, a
// KeyedProcessFunction (or KeyedBroadcastProcessFunction with a broadcast
// input) for a keyed one, an AsyncKeyedProcessFunction when the type has
// an async state version and the operator sets async_state: true. This
// one keeps a running total per key, with state TTL:
//
//	package main
//
//	import (
//		"context"
//		"encoding/json"
//		"fmt"
//		"os"
//		"time"
//
//		"github.com/kstreamd/kstreamd/sdk"
//		"github.com/kstreamd/kstreamd/state"
//	)
//
//	type params struct {
//		Field string        `yaml:"field"`
//		TTL   time.Duration `yaml:"ttl"`
//	}
//
//	type sessionTotal struct {
//		field string
//		desc  state.ValueStateDescriptor[float64]
//		total state.ValueState[float64]
//	}
//
//	func (s *sessionTotal) Open(ctx sdk.OpenContext) (err error) {
//		s.total, err = state.GetValueState(ctx.Backend, s.desc)
//		return err
//	}
//
//	func (s *sessionTotal) ProcessElement(_ context.Context, rec sdk.Record, out sdk.Collector) error {
//		var in map[string]any
//		_ = json.Unmarshal(rec.Value, &in)
//		n, ok := in[s.field].(float64)
//		if !ok { // the record meets its source's on_error policy
//			return &sdk.RecordError{Reason: sdk.ReasonInvalid, Detail: fmt.Sprintf("%q must be a number", s.field)}
//		}
//		cur, _, err := s.total.Value() // the current key's total; 0 if none
//		if err != nil {
//			return err // any other error fails the job
//		}
//		if err := s.total.Update(cur + n); err != nil {
//			return err
//		}
//		v, _ := json.Marshal(map[string]any{"key": string(rec.Key), "total": cur + n})
//		return out.Collect(sdk.Record{Key: rec.Key, Value: v, Timestamp: rec.Timestamp})
//	}
//
//	func main() {
//		reg := sdk.NewRegistry() // the built-in types
//		err := reg.Register(sdk.Factory{
//			Type:   "session_total",
//			Doc:    "Per key, the running total of a numeric field.",
//			Traits: sdk.Traits{Keyed: true},
//			Params: func() any { return &params{Field: "amount", TTL: time.Hour} }, // the defaults
//			State:  []string{"total"},
//			New: func(ctx sdk.FactoryContext) (any, error) {
//				p := ctx.Params.(*params)
//				return &sessionTotal{field: p.Field, desc: state.ValueStateDescriptor[float64]{
//					Name:       "total",
//					Serializer: state.Float64Serializer{},
//					TTL:        &state.StateTtlConfig{TTL: p.TTL},
//				}}, nil
//			},
//		})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		os.Exit(sdk.Main(reg))
//	}
//
// and a pipeline names the type:
//
//	operators:
//	  - name: totals
//	    type: session_total
//	    input: payments
//	    key_by: customer
//	    params: {field: amount, ttl: 30m}
//
// examples/custom-operator in the repository is this program as a module
// of its own, with the async state version, a params check and a pipeline.
//
// # What comes from where
//
// This package aliases what an operator author needs from the packages
// that define it (operators, runtime): Factory, Traits, FactoryContext,
// ParamsChecker; the function interfaces and their OpenContext,
// AsyncOpenContext, Collector, CheckpointedFunction (operator state) and
// BroadcastStateful; Record, Header and RecordError with the reasons a
// custom operator reports. Keyed state stays in the public package state:
// the descriptors (ValueStateDescriptor, ListStateDescriptor,
// MapStateDescriptor, ReducingStateDescriptor, AggregatingStateDescriptor),
// their serializers, StateTtlConfig, the synchronous getters
// (state.GetValueState(ctx.Backend, desc)) and the async ones
// (state.GetAsyncValueState(ctx.AEC, desc)) with their StateFutures.
// Broadcast state is in package broadcast. A state's name, type,
// serializer and TTL on/off are stored with it: change them and a restore
// from an older checkpoint fails with a state migration error.
package sdk
