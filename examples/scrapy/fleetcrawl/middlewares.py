"""One gateway session per download slot, and ban reports without MITM.

GatewaySessionMiddleware points every request at the gateway with a
username naming this slot's session (ns-<namespace>+pool-<pool>+session-<spider>-<slot>),
so all requests of a slot leave through one exclusive upstream proxy. When a
response says the site banned us (403 or 429), it tells the lease API
(DELETE /v1/sessions/{session}?outcome=banned&domain=...): the session's lease
is released as banned, the proxy cools down for that domain, and the
request is retried; the next connection of the session gets another proxy.

With GATEWAY_SESSION_STATE, each slot's cookie jar travels with its IP
(docs/sessionstate.md): before a slot's first request the middleware
acquires its session's lease through the lease API (the gateway then joins
that lease), and the grant hands back the jar kept for that proxy and
domain, if any; at the end the jar is kept again
(PUT /v1/sessions/{session}/state). After a ban the slot starts with a
clean jar on its next proxy.
"""
import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request

from scrapy import signals
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware

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
        self.keep_state = settings.getbool("GATEWAY_SESSION_STATE")
        self.slots = {}  # session -> domain, for the slots whose jar was restored
        self.crawler = None

    @classmethod
    def from_crawler(cls, crawler):
        mw = cls(crawler.settings, crawler.stats)
        mw.crawler = crawler
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

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
        if self.keep_state:
            request.meta["cookiejar"] = session  # one jar per slot, as one IP per slot
            if session not in self.slots:
                self.restore_jar(request, session)
        return None

    def restore_jar(self, request, session):
        """Takes the slot's lease as the gateway would, and loads the jar the
        grant hands back into this request (CookiesMiddleware, after us,
        puts it into the slot's jar)."""
        domain = urllib.parse.urlsplit(request.url).hostname
        body = {"holder": "scrapy:" + session, "session": session, "domain": domain, "wait": "30s"}
        if self.namespace:
            body["namespace"] = self.namespace
        if self.pool:
            body["selector"] = "crawl.proxyfleet.io/pool=" + self.pool
        try:
            lease = self.call("POST", "/v1/leases", json.dumps(body).encode(), "application/json")
        except urllib.error.URLError as e:
            logger.error("Taking the lease of session %s failed: %s", session, e)
            return
        self.slots[session] = domain
        if lease.get("state"):
            cookies = json.loads(base64.b64decode(lease["state"]))
            request.cookies = cookies + (request.cookies if isinstance(request.cookies, list) else [])
            logger.info("Restored %d cookie(s) of session %s on proxy %s", len(cookies), session, lease["proxy"]["name"])
            self.stats.inc_value("gateway/jars_restored")

    def spider_closed(self, spider):
        if not self.keep_state:
            return
        jars = self.cookie_jars()
        for session, domain in self.slots.items():
            jar = jars.get(session)
            cookies = [cookie_dict(c) for c in (jar.jar if jar else [])]
            query = {"domain": domain}
            if self.namespace:
                query["namespace"] = self.namespace
            path = f"/v1/sessions/{urllib.parse.quote(session, safe='')}/state?{urllib.parse.urlencode(query)}"
            try:
                self.call("PUT", path, json.dumps(cookies).encode(), "application/octet-stream")
                # The lease is left to the gateway, which gives it back once
                # the session idles: releasing the session here would also
                # make the store forget which proxy it had.
                logger.info("Kept %d cookie(s) of session %s", len(cookies), session)
            except urllib.error.URLError as e:
                logger.error("Keeping the jar of session %s failed: %s", session, e)

    def cookie_jars(self):
        for mw in self.crawler.engine.downloader.middleware.middlewares:
            if isinstance(mw, CookiesMiddleware):
                return mw.jars
        return {}

    def call(self, method, path, body, content_type):
        req = urllib.request.Request(self.lease_api + path, data=body, method=method,
                                     headers={"Authorization": "Bearer " + self.token, "Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=60) as resp:
            data = resp.read()
            return json.loads(data) if data else {}

    def process_response(self, request, response, spider):
        if response.status not in self.ban_statuses:
            return response
        session = request.meta.get("gateway_session") or self.session_of(request, spider)
        domain = urllib.parse.urlsplit(request.url).hostname
        self.report_ban(session, domain)
        self.stats.inc_value("gateway/bans")
        if self.keep_state and session in self.slots:
            # A new IP next: a clean jar, and the new proxy's own, if kept.
            self.slots.pop(session, None)
            self.cookie_jars().pop(session, None)
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


def cookie_dict(c):
    """A cookie as Request.cookies takes it; the domain only when the site
    set one (a host-only cookie must stay host-only)."""
    d = {"name": c.name, "value": c.value, "path": c.path}
    if c.domain_specified:
        d["domain"] = c.domain
    return d
