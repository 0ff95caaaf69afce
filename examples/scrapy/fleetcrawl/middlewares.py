"""One gateway session per download slot, and ban reports without MITM.

GatewaySessionMiddleware points every request at the gateway with a
username naming this slot's session (ns-<namespace>+pool-<pool>+session-<spider>-<slot>),
so all requests of a slot leave through one exclusive upstream proxy. When a
response says the site banned us (403 or 429), it tells the lease API
(DELETE /v1/sessions/{session}?outcome=banned&domain=...): the session's lease
is released as banned, the proxy cools down for that domain, and the
request is retried; the next connection of the session gets another proxy.
"""
import logging
import urllib.error
import urllib.parse
import urllib.request

logger = logging.getLogger(__name__)


class GatewaySessionMiddleware:
    def __init__(self, settings, stats):
        self.gateway = settings.get("GATEWAY")
        self.token = settings.get("GATEWAY_TOKEN")
        self.namespace = settings.get("GATEWAY_NAMESPACE")
        self.pool = settings.get("GATEWAY_POOL")
        self.lease_api = settings.get("LEASE_API").rstrip("/")
        self.retries = settings.getint("GATEWAY_BAN_RETRIES")
        self.ban_statuses = set(settings.getlist("GATEWAY_BAN_STATUSES"))
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings, crawler.stats)

    def session_of(self, request, spider):
        slot = request.meta.get("download_slot") or urllib.parse.urlsplit(request.url).netloc
        # Basic credentials split at the first ':', so the username may hold none.
        return f"{spider.name}-{slot}".replace(":", "_")

    def process_request(self, request, spider):
        session = self.session_of(request, spider)
        terms = []
        if self.namespace:
            terms.append("ns-" + self.namespace)
        if self.pool:
            terms.append("pool-" + self.pool)
        terms.append("session-" + session)
        user = urllib.parse.quote("+".join(terms), safe="")
        token = urllib.parse.quote(self.token, safe="")
        request.meta["proxy"] = f"http://{user}:{token}@{self.gateway}"
        request.meta["gateway_session"] = session
        return None

    def process_response(self, request, response, spider):
        if response.status not in self.ban_statuses:
            return response
        session = request.meta.get("gateway_session") or self.session_of(request, spider)
        domain = urllib.parse.urlsplit(request.url).hostname
        self.report_ban(session, domain)
        self.stats.inc_value("gateway/bans")
        tries = request.meta.get("gateway_ban_retries", 0)
        if tries >= self.retries:
            return response
        retry = request.copy()
        retry.meta["gateway_ban_retries"] = tries + 1
        retry.dont_filter = True
        return retry

    def report_ban(self, session, domain):
        query = {"outcome": "banned", "domain": domain}
        if self.namespace:
            query["namespace"] = self.namespace
        url = f"{self.lease_api}/v1/sessions/{urllib.parse.quote(session, safe='')}?{urllib.parse.urlencode(query)}"
        req = urllib.request.Request(url, method="DELETE", headers={"Authorization": "Bearer " + self.token})
        try:
            # Blocking, but short and rare (once per ban): the lease API answers from memory.
            with urllib.request.urlopen(req, timeout=10) as resp:
                logger.info("Reported a ban of session %s for %s (%s)", session, domain, resp.status)
        except urllib.error.URLError as e:
            logger.error("Reporting a ban of session %s for %s failed: %s", session, domain, e)
