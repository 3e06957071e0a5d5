"""Screenshots of the MLflow UI as a reviewing team sees it (headless Chromium via Playwright):
runs table, one child run, the traces table with its assessment columns, and one trace.

    python scripts/mlflow_screenshots.py http://127.0.0.1:5000 EXPERIMENT_ID OUT_DIR [--chromium /usr/bin/chromium]

Start the UI first (`dkilab ui` or `mlflow server ...`). Prints the files it wrote.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("experiment_id")
    ap.add_argument("out", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--run", help="child run id for the run page (default: the first cell)")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    import mlflow

    mlflow.set_tracking_uri(a.url)
    runs = mlflow.search_runs([a.experiment_id], filter_string="tags.`dkilab.kind` = 'cell'", output_format="list")
    run_id = a.run or (runs[-1].info.run_id if runs else None)
    traces = mlflow.search_traces(locations=[a.experiment_id], max_results=1, return_type="list")
    a.out.mkdir(parents=True, exist_ok=True)
    base = a.url.rstrip("/") + f"/#/experiments/{a.experiment_id}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 2200, "height": 1200})
        page.add_init_script("window.localStorage.setItem('mlflow.assistant.open', 'false')")

        def shot(name: str, url: str, wait: str | None = None, action=None) -> None:
            page.goto(url)
            page.wait_for_load_state("load")
            page.wait_for_timeout(3000)
            if wait:
                page.wait_for_selector(wait, timeout=20000)
            page.wait_for_timeout(1500)
            for label in ("Got it", "Close"):
                btn = page.get_by_role("button", name=label)
                if btn.count():
                    try:
                        btn.first.click(timeout=1000)
                    except Exception:
                        pass
            if action:
                action()
                page.wait_for_timeout(1500)
            path = a.out / f"{name}.png"
            page.screenshot(path=str(path), full_page=False)
            print(path)

        def expand():  # show the cells under each parent run
            for btn in page.locator("button[data-component-id*='runnamecellrenderer']").all():
                try:
                    btn.click(timeout=2000)
                except Exception:
                    pass

        shot("runs", f"{base}/runs", action=expand)
        shot("chart", f"{base}/runs?compareRunsMode=CHART", action=expand)
        if run_id:
            shot("child_run", f"{base}/runs/{run_id}")
            shot("child_run_traces", f"{base}/runs/{run_id}/traces")
        shot("traces", f"{base}/traces")
        if traces:
            def open_first():
                page.get_by_role("row").nth(1).get_by_role("cell").nth(2).click()
                page.wait_for_timeout(2500)
                span = page.get_by_text("recall", exact=True)
                if span.count():
                    span.first.click()
            shot("trace", f"{base}/traces", action=open_first)
        browser.close()


if __name__ == "__main__":
    main()
