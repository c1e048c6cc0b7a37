// Package deploy holds no code: its tests check the deployment files at the
// root of the repository against each other and against a running daemon.
//
// They cover the Dockerfile and .dockerignore, docker-compose.yml,
// configs/colorshape-docker.yaml (the pipeline the compose file mounts),
// configs/prometheus.yml and the Grafana provisioning and dashboard under
// configs/grafana/:
//
//   - every metric a dashboard panel queries is exported by a running
//     kstreamd (the tests build the binary and run the reference job,
//     configs/colorshape.yaml with its addresses and data dir made local, on
//     the embedded broker, on loopback ports; the rules row's metrics on
//     configs/rules.yaml, the windows row's on
//     configs/examples/tumbling_window.yaml);
//   - that reference job checkpoints, commits its exactly-once sink's
//     transactions (read_committed readers see no duplicate) and writes a
//     malformed item and an undecodable rule to its dead-letter topics with
//     their headers;
//   - docker-compose.yml passes `docker-compose config -q` and
//     configs/prometheus.yml passes `promtool check config`; the provisioning
//     YAML and the dashboard JSON parse, and every panel uses the provisioned
//     datasource; configs/colorshape-docker.yaml passes `kstreamd validate`;
//   - the files agree: the config path the image runs is the one compose
//     mounts, the topics kafka-init creates are the job's, Prometheus scrapes
//     the metrics port the job listens on, Grafana loads the dashboard from
//     where compose mounts it;
//   - configs/colorshape-docker.yaml runs, its addresses made local, against
//     an outside broker (kfake on loopback) whose topics are created as
//     kafka-init creates them: it matches, checkpoints under its data_dir and
//     logs JSON;
//   - a real Prometheus server (Debian's prometheus) scrapes a running daemon
//     and answers every dashboard query with data.
//
// No Docker engine is needed. The tools the tests run come from Debian
// packages: docker-compose and prometheus (which brings promtool). A missing
// tool fails its test with the package to install.
package deploy
