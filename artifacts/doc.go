// Package artifacts holds no code: its directory is the installation of
// proxy-operator (the CRDs, RBAC and Deployment under kustomization.yaml, the
// Helm chart under helm/, the alert rules under alerts/ and the Grafana
// dashboard under dashboards/), and its tests check them with the tools a
// cluster admin uses: bin/kubectl kustomize (built by `make testenv`),
// bin/helm and bin/promtool (built by `make testtools`), server-side
// dry-runs against a real API server (pkg/testing/testenv), and the
// operator's real metrics registry (pkg/metrics).
package artifacts
