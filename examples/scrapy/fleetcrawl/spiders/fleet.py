import scrapy


class FleetSpider(scrapy.Spider):
    """Fetches START_URLS through the gateway and records what came back."""

    name = "fleet"

    def start_requests(self):
        for url in self.settings.getlist("START_URLS"):
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        # The start of the body: an echo target's answer says which exit IP
        # the request left from.
        # Proxy-Operator-Attempts: how many IPs the gateway tried (more
        # than one when it judged an answer a ban and retried).
        attempts = response.headers.get("Proxy-Operator-Attempts", b"").decode()
        yield {"url": response.url, "status": response.status, "body": response.text[:100].strip(), "attempts": attempts}
