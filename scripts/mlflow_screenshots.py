"""Screenshots of the MLflow UI as a reviewing team sees it (headless Chromium via Playwright), the README's
reviewing recipe step by step: the parent run's Overview with its description opened (the comparison with
intervals and the paired differences), one cell's run page (every metric, by group), the runs chart view,
the traces table with its assessment and expectation columns, and one trace.

    python scripts/mlflow_screenshots.py URL EXPERIMENT OUT_DIR [--prefix P] [--chromium /usr/bin/chromium] [--run RUN_ID]

URL is a running MLflow UI (`dkilab ui` or `mlflow server ...`); EXPERIMENT its name or id. Prints each file
it wrote, and exits 1 naming the step whose page did not show what it should (so a test can run it).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# what each page must show once loaded: the screenshot is of a page that answers the question
EXPECT = {"parent": ["Comparison", "Paired differences"], "cell": ["Metrics ("], "traces": ["expected_response"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("experiment")
    ap.add_argument("out", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--run", help="cell run id for the run page (default: the newest cell)")
    ap.add_argument("--prefix", default="", help="file name prefix (the README's pictures: review-)")
    a = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    import mlflow

    mlflow.set_tracking_uri(a.url)
    exp = mlflow.get_experiment_by_name(a.experiment) or mlflow.get_experiment(a.experiment)
    runs = mlflow.search_runs([exp.experiment_id], output_format="list", order_by=["attributes.start_time DESC"])
    parent = next((r for r in runs if r.data.tags.get("dkilab.kind") == "experiment"), None)
    cell = a.run or next((r.info.run_id for r in runs if r.data.tags.get("dkilab.kind") == "cell"), None)
    traces = mlflow.search_traces(locations=[exp.experiment_id], max_results=1, return_type="list")
    a.out.mkdir(parents=True, exist_ok=True)
    base = a.url.rstrip("/") + f"/#/experiments/{exp.experiment_id}"
    failed: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1600, "height": 1100})

        def dismiss() -> None:  # first-visit tips and the assistant panel cover the page
            for label in ("Got it", "Close"):
                for btn in page.get_by_role("button", name=label).all():
                    try:
                        btn.click(timeout=1000)
                    except Exception:
                        pass

        def shot(name: str, url: str, action=None) -> None:
            page.goto(url)
            page.wait_for_load_state("load")
            page.wait_for_timeout(4000)
            dismiss()
            if action:
                action()
                page.wait_for_timeout(1500)
            missing = [t for t in EXPECT.get(name, []) if t not in page.inner_text("body")]
            if missing:
                failed.append(f"{name}: {url} does not show {missing}")
            path = a.out / f"{a.prefix}{name}.png"
            page.screenshot(path=str(path), full_page=False)
            print(path)

        def show_more() -> None:  # the description (the comparison) opens in full
            more = page.get_by_text("Show more", exact=True)
            if more.count():
                more.first.click()

        def expand() -> None:  # show the cells under each parent run
            for btn in page.locator("button[data-component-id*='runnamecellrenderer']").all():
                try:
                    btn.click(timeout=2000)
                except Exception:
                    pass

        if parent is not None:
            shot("parent", f"{base}/runs/{parent.info.run_id}", action=show_more)
        if cell:
            shot("cell", f"{base}/runs/{cell}")
        shot("runs", f"{base}/runs", action=expand)
        shot("chart", f"{base}/runs?compareRunsMode=CHART", action=expand)
        shot("traces", f"{base}/traces")
        if traces:
            def open_first() -> None:
                page.get_by_role("row").nth(1).get_by_role("cell").nth(2).click()
                page.wait_for_timeout(2500)
                span = page.get_by_text("recall", exact=True)
                if span.count():
                    span.first.click()
            shot("trace", f"{base}/traces", action=open_first)
        browser.close()
    for f in failed:
        print(f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
