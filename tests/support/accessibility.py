"""axe-core's WCAG 2 A/AA check, run in Chromium on a page as a user sees
it (every <details> opened); axe's script comes with the
axe-playwright-python package, so the check needs no network."""

from axe_playwright_python.sync_playwright import Axe

WCAG_2_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
BLOCKING = {"serious", "critical"}
AXE = Axe()


class Audit:
    """Runs axe on each state of a page and keeps what it found, so one
    failure lists every page's problems at once."""

    def __init__(self, page):
        self.page = page
        self.found: dict[str, list[str]] = {}

    def check(self, label: str) -> None:
        self.page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        options = {"runOnly": {"type": "tag", "values": WCAG_2_AA}, "resultTypes": ["violations"]}
        results = AXE.run(self.page, options=options)
        self.found[label] = [
            f"{rule['id']} ({node['impact']}) at {' '.join(map(str, node['target']))} — {rule['helpUrl']}"
            for rule in results.response["violations"]
            for node in rule["nodes"]
            if node["impact"] in BLOCKING
        ]

    def check_narrow_and_wide(self, label: str) -> None:
        """Narrow first: more boxes scroll there. Leaves the page wide."""
        for width in (600, 1366):
            self.page.set_viewport_size({"width": width, "height": 900})
            self.check(f"{label} at {width}px")

    def assert_clean(self) -> None:
        lines = []
        for label, items in self.found.items():
            lines += [f"{label}: {item}" for item in items]
        assert not lines, f"{len(lines)} serious or critical WCAG violations:\n" + "\n".join(lines)
