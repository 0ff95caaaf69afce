// Package gatewayintegration tests the gateway end to end (tests only): a real
// kube-apiserver for the Proxy objects, their credentials Secrets,
// TokenReview and SubjectAccessReview; real tinyproxy and squid processes as
// External upstreams; and real clients nobody here wrote: curl, Python
// requests and a Scrapy crawl of examples/scrapy.
package gatewayintegration
