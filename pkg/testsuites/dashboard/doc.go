// Package dashboard tests the operator's web UI (pkg/dashboard) in a real
// browser: Debian's headless chromium driven by chromedp against the
// operator binary on a real API server, its pools made by the local
// provider. It holds tests only; chromium comes from `make deps`.
package dashboard
