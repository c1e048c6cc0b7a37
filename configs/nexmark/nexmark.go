// Package nexmark holds the Nexmark queries as kstreamd pipelines,
// q<N>.yaml, embedded so that `kstreamd bench --scenario nexmark-q<N>` runs
// exactly these files (with its own brokers, topics, job name, checkpoint
// interval and delivery). Each file's header gives the query's SQL from
// the nexmark project (github.com/nexmark/nexmark,
// nexmark-flink/src/main/resources/queries) and how it is translated.
package nexmark

import "embed"

// Queries are the q<N>.yaml files.
//
//go:embed q*.yaml
var Queries embed.FS
