// Package pipeline is the YAML description of a kstreamd job: the schema
// that `kstreamd run --config FILE` runs and `kstreamd validate --config FILE`
// checks, its strict decoding, its defaults and its validation.
//
// A config names the job, the Kafka cluster (or an embedded development
// broker), the state backend, the metrics listener and the log, and then the
// job graph: sources read Kafka topics, operators (KnownOperatorTypes)
// transform the streams, sinks write them back to Kafka, each referring to
// its input by name. configs/colorshape.yaml is the reference job, commented
// line by line.
//
// # Strictness
//
// A config file is refused, with every problem listed at once, when it has
// a YAML syntax error, is empty or holds more than one document, has an
// unknown or duplicate field at any level, a value of the wrong type, a
// missing required field, or an impossible value: a parallelism below 1, an
// invalid topic name, an unknown enum value, a duplicate name, a reference to
// a name that does not exist. Each problem is reported as
//
//	FILE:LINE:COL: FIELD.PATH: message
//
// for example
//
//	configs/x.yaml:12:5: operators[0].parallelism: must be >= 1, got 0
//	configs/x.yaml:3:3: kafka.bootstrap: unknown field (did you mean "brokers"?)
//
// The file is parsed into a yaml.Node tree and walked field by field rather
// than decoded with yaml.v3's Decoder.KnownFields: a custom UnmarshalYAML
// that calls node.Decode loses KnownFields (go-yaml/yaml issue 460), and a
// walk keeps the line and column of every problem. The shape follows
// Prometheus's config.Load and nats-server's configErr.
//
// # Defaults
//
// Defaults are set before decoding (Default, and each list item's defaults
// before that item is decoded), so a field left out keeps its default and a
// field written as null (`address:`) does too. Each field's doc comment
// states its default and unit. Defaults that depend on other fields (the
// state and embedded-broker directories under data_dir, the brokers of an
// embedded broker, the derived max parallelism) stay zero in the struct and
// are resolved by methods: Config.StateDir, Config.EmbeddedDataDir,
// Config.Brokers, Config.MaxParallelism, Config.SourceParallelism,
// Config.OperatorParallelism and Config.SinkParallelism.
//
// # Usage
//
// Load a file, report every problem, and use the resolved values:
//
//	cfg, err := pipeline.Load(path)
//	if err != nil {
//		// err.Error() is one "FILE:LINE:COL: PATH: message" line per problem.
//		var problems pipeline.ConfigErrors
//		if errors.As(err, &problems) {
//			for _, p := range problems {
//				fmt.Fprintln(os.Stderr, p)
//			}
//			os.Exit(2)
//		}
//		return err // the file could not be read
//	}
//	fmt.Println("brokers", cfg.Brokers(), "key groups", cfg.MaxParallelism())
//	for i := range cfg.Operators {
//		op := &cfg.Operators[i]
//		fmt.Println(op.Name, "runs", cfg.OperatorParallelism(op), "subtasks")
//	}
//
// `kstreamd validate` and `kstreamd run` both call Load, so a config that
// validates is one run accepts. A Config built in code starts from Default
// and is checked with Config.Validate, whose problems then carry field paths
// without positions.
package pipeline
