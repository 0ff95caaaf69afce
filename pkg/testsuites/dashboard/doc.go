// Package dashboard tests the operator's web UI (pkg/dashboard) against the
// operator binary on a real API server: in a real browser (Debian's
// headless chromium driven by chromedp, its pools made by the local
// provider), and who may open it at what cost in reviews and slots, counted
// by the API server. It holds tests only; chromium comes from `make deps`.
package dashboard
