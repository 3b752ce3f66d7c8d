// Package deploy holds what runs tokentrace in a fleet, as files for the
// tools operators already run, and the tests that prove them:
//
//   - prometheus/: scrape configurations and the SLO recording and
//     alerting rules (multi-window, multi-burn-rate);
//   - grafana/: the serve and gateway dashboards and their provisioning;
//   - kubernetes/: the gateway's Deployment, Services, ConfigMap and
//     PodDisruptionBudget; bench/ beneath it, a kustomize base that runs
//     N bench shards as an Indexed Job and merges their folders
//     (docs/scale.md);
//   - container/: the gateway's container image definition.
//
// The tests check the rules and configurations with promtool, run a real
// Prometheus against serve and gateway under bench load and evaluate every
// query of the dashboards and rules, decode the dashboards strictly
// against Grafana's schema and the manifests strictly into the Kubernetes
// API types, and build and run the image where podman or buildah works.
// docs/operate.md is the guide.
package deploy
