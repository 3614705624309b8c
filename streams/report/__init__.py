"""Analyst reports: pure aggregation (:mod:`.aggregate`) and HTML/SVG (:mod:`.html`)."""

from streams.report.aggregate import aggregate, p95
from streams.report.html import render_html

__all__ = ["aggregate", "p95", "render_html"]
