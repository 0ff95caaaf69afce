"""A Scrapy project that crawls through the proxy-operator gateway.

Everything that says where to go comes from the environment, so the same
project runs against `make run` and a cluster:

  GATEWAY            host:port of the gateway (the proxy-operator-gateway Service, port 3128)
  GATEWAY_TOKEN      the crawler's bearer token (a ServiceAccount token); any word under --lease-auth=none
  GATEWAY_NAMESPACE  the ns- term: where the proxies are (optional)
  GATEWAY_POOL       the pool- term: a ProxyPool's members (optional)
  LEASE_API          base URL of the lease API, for ban reports (e.g. http://proxy-operator-leases.proxy-operator:8080)
  START_URLS         space-separated URLs to crawl
  SESSION_STATE      "1": each slot's cookie jar travels with its IP (docs/sessionstate.md)
"""
import os

BOT_NAME = "fleetcrawl"
SPIDER_MODULES = ["fleetcrawl.spiders"]

GATEWAY = os.environ.get("GATEWAY", "127.0.0.1:3129")
GATEWAY_TOKEN = os.environ.get("GATEWAY_TOKEN", "none")
GATEWAY_NAMESPACE = os.environ.get("GATEWAY_NAMESPACE", "")
GATEWAY_POOL = os.environ.get("GATEWAY_POOL", "")
LEASE_API = os.environ.get("LEASE_API", "http://127.0.0.1:8080")
START_URLS = os.environ.get("START_URLS", "").split()
# How often one request is retried on another proxy after a ban.
GATEWAY_BAN_RETRIES = 2
GATEWAY_BAN_STATUSES = [403, 429]
GATEWAY_SESSION_STATE = os.environ.get("SESSION_STATE", "") == "1"

DOWNLOADER_MIDDLEWARES = {
    # After RetryMiddleware (550) sees responses, before HttpProxyMiddleware
    # (750) reads meta["proxy"]: so bans reach us first, and our proxy URL
    # is the one used.
    "fleetcrawl.middlewares.GatewaySessionMiddleware": 600,
}
# Bans are handled by moving the session, not by retrying on the same proxy.
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408]

ROBOTSTXT_OBEY = False
# Silences Scrapy 2.7+'s deprecation warning about the old default.
REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")
