"""report_browser.py - drives a boundsort report page in headless Chromium (Selenium, Debian's browser).

    report_browser.py curate HTML OUTDIR [--screenshots DIR]
        Loads the page, checks the unit table against the embedded data, selects a unit, relabels it (button
        and keyboard), marks a merge group (ticks and the "merge" button of a cross-correlogram), filters and
        sorts the table, exports both files and checks their content, checks that a reload keeps the
        curation, visits every tab, and saves screenshots.
    report_browser.py scale HTML OUTDIR --max-load-s S
        Loads a large page and checks that it is ready (table drawn, first unit shown) within S seconds.

Every check prints one line; the last line is "N passed, N failed" and the exit code is 1 on any failure.
"""
import argparse
import json
import os
import shutil
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_fixtures import decode, load_report  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok: {what}")
    else:
        failed += 1
        print(f"FAIL: {what}")
    return cond


def find_exe(*names):
    for n in names:
        p = shutil.which(n) or (n if os.path.isfile(n) and os.access(n, os.X_OK) else None)
        if p:
            return p
    return None


def start(download_dir):
    opts = webdriver.ChromeOptions()
    opts.binary_location = find_exe("chromium", "chromium-browser", "/usr/lib/chromium/chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1100",
              "--force-device-scale-factor=1", "--allow-file-access-from-files", "--no-first-run"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": download_dir,
                                           "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = find_exe("chromedriver", "/usr/lib/chromium/chromedriver")
    driver = webdriver.Chrome(service=Service(executable_path=drv), options=opts)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": download_dir})
    return driver


def wait_for(fn, timeout, what):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # the page may still be loading
            pass
        time.sleep(0.05)
    check(False, f"{what} within {timeout} s")
    return None


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def row_ids(driver):
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#units tbody tr[data-u]')).map(tr => Number(tr.children[1].textContent))")


def row_label(driver, uid):
    return driver.execute_script(
        "const tr = Array.from(document.querySelectorAll('#units tbody tr[data-u]')).find(r => Number(r.children[1].textContent) "
        "=== arguments[0]); return tr ? tr.children[2].textContent : null", uid)


def tick(driver, uid):
    driver.execute_script(
        "const tr = Array.from(document.querySelectorAll('#units tbody tr[data-u]')).find(r => Number(r.children[1].textContent) "
        "=== arguments[0]); tr.querySelector('input').click()", uid)


def click_row(driver, uid):
    driver.execute_script(
        "const tr = Array.from(document.querySelectorAll('#units tbody tr[data-u]')).find(r => Number(r.children[1].textContent) "
        "=== arguments[0]); tr.scrollIntoView({block: 'nearest'}); tr.children[3].click()", uid)


def ink(driver, canvas_id):
    """Fraction of a canvas' pixels that are not blank (alpha > 0 and not white)."""
    return driver.execute_script(
        "const c = document.getElementById(arguments[0]); const d = c.getContext('2d').getImageData(0, 0, c.width, "
        "c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i+3] > 0 && (d[i] < 245 || d[i+1] < 245 "
        "|| d[i+2] < 245)) n++; return n / (c.width * c.height);", canvas_id)


def wait_file(path, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if os.path.exists(path) and os.path.getsize(path) > 0 and not os.path.exists(path + ".crdownload"):
            time.sleep(0.2)
            return True
        time.sleep(0.1)
    return False


def shot(driver, dirs, name):
    for d in dirs:
        if d:
            os.makedirs(d, exist_ok=True)
            driver.save_screenshot(os.path.join(d, name))


def curate(args):
    data, _ = load_report(args.html)
    ids = [int(v) for v in decode(data["unit_ids"])]
    group_col = next((c for c in data["columns"] if c["key"] == "group"), None)
    initial = [(group_col["values"][u] if group_col and group_col["values"][u] in ("good", "mua", "noise") else
                "unsorted") for u in range(len(ids))]
    n_spikes = next(c for c in data["columns"] if c["key"] == "n_spikes")["values"]
    dl = os.path.join(args.outdir, "downloads")
    shutil.rmtree(dl, ignore_errors=True)
    os.makedirs(dl)
    shots = [args.outdir, args.screenshots]
    driver = start(dl)
    try:
        driver.get("file://" + os.path.abspath(args.html))
        check(wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready"), "page ready")
        check(not console_errors(driver), f"no console errors: {console_errors(driver)}")
        check(row_ids(driver) == ids, f"table lists the {len(ids)} units in ascending id")
        # the default columns fit a 1400-px window without horizontal scrolling
        driver.set_window_size(1400, 900)
        fit = driver.execute_script("const w = document.querySelector('.table-wrap'); "
                                    "return [w.scrollWidth, w.clientWidth]")
        check(fit[0] <= fit[1], f"default columns fit a 1400-px window (table {fit[0]} px, room {fit[1]} px)")
        shot(driver, shots, "report-units.png")
        driver.set_window_size(1600, 1100)
        # unit types: a column, the deciding rule as the cell's tooltip
        if any(c["key"] == "unit_type" for c in data["columns"]):
            cells = driver.find_elements(By.CSS_SELECTOR, "#units td.utype")
            check(cells and all(c.get_attribute("title") for c in cells), "unit_type cells carry their reason")
        # the column menu: hide a column, which stays hidden after a reload; "default columns" restores it
        heads = lambda: [th.get_attribute("data-key") for th in driver.find_elements(By.CSS_SELECTOR, "#units th[data-key]")]
        driver.find_element(By.ID, "col-btn").click()
        driver.find_element(By.CSS_SELECTOR, "#col-menu input[data-col=y_um]").click()
        check("y_um" not in heads() and "n_spikes" in heads(), f"unticking y_um hides it ({heads()})")
        hidden = [i.get_attribute("data-col") for i in driver.find_elements(By.CSS_SELECTOR, "#col-menu input[data-col]")
                  if not i.is_selected() and i.get_attribute("data-col") != "y_um"]
        extra = hidden[0]
        driver.find_element(By.CSS_SELECTOR, f"#col-menu input[data-col='{extra}']").click()
        check(extra in heads(), f"ticking {extra} shows it")
        driver.refresh()
        wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready after reload")
        check("y_um" not in heads() and extra in heads(), "the column choice survives a reload")
        driver.find_element(By.ID, "col-btn").click()
        driver.find_element(By.ID, "col-default").click()
        check("y_um" in heads() and extra not in heads(), "default columns restored")
        driver.find_element(By.ID, "col-btn").click()

        # select the unit with the most spikes that has similar units
        sim = decode(data["similar"]["unit"]).reshape(len(ids), -1) if data["similar"]["n"] else None
        cand = sorted(range(len(ids)), key=lambda u: -n_spikes[u])
        u = next(u for u in cand if sim is not None and (sim[u] >= 0).any())
        uid = ids[u]
        click_row(driver, uid)
        title = driver.find_element(By.ID, "unit-title").text
        check(title.startswith(f"Unit {uid}"), f"selecting unit {uid} shows it ('{title}')")
        for cid in ("c-template", "c-acg", "c-amp", "c-pos"):
            check(ink(driver, cid) > 0.01, f"{cid} draws something ({ink(driver, cid):.3f} of its pixels)")
        n_ccg = len(driver.find_elements(By.CSS_SELECTOR, "#ccgs figure canvas"))
        check(n_ccg == int((sim[u] >= 0).sum()), f"{n_ccg} cross-correlograms, one per similar unit")
        shot(driver, shots, "report-unit.png")

        # relabel with the button, then another unit with the keyboard
        driver.find_element(By.CSS_SELECTOR, "#label-buttons button[data-label=noise]").click()
        check(row_label(driver, uid) == "noise", f"unit {uid} relabelled noise in the table")
        order = row_ids(driver)
        nxt = order[(order.index(uid) + 1) % len(order)]
        body = driver.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.ARROW_DOWN)
        check(driver.find_element(By.ID, "unit-title").text.startswith(f"Unit {nxt}"), f"down arrow selects unit {nxt}")
        before = row_label(driver, nxt)
        body.send_keys("m")
        check(row_label(driver, nxt) == "mua", f"key m relabels unit {nxt} mua")
        if before != "mua":  # undo and redo, by keyboard and by button
            body.send_keys(Keys.CONTROL, "z")
            check(row_label(driver, nxt) == before, f"Ctrl+Z gives unit {nxt} back its label {before}")
            check(row_label(driver, uid) == "noise", f"one undo leaves unit {uid}'s earlier change")
            body.send_keys(Keys.CONTROL, "y")
            check(row_label(driver, nxt) == "mua", f"Ctrl+Y relabels unit {nxt} mua again")
            driver.find_element(By.ID, "undo").click()
            driver.find_element(By.ID, "undo").click()
            check(row_label(driver, uid) != "noise" and row_label(driver, nxt) == before, "two undos by button")
            driver.find_element(By.ID, "redo").click()
            driver.find_element(By.ID, "redo").click()
            check(row_label(driver, uid) == "noise" and row_label(driver, nxt) == "mua", "two redos by button")
            check(not driver.find_element(By.ID, "redo").is_enabled(), "nothing left to redo")

        # merge group: tick two units, press merge; then merge a third through a cross-correlogram's button
        near = {ids[x] for x in sim[u] if x >= 0}
        others = sorted((i for i in ids if i not in (uid, nxt)), key=lambda i: i in near)  # not similar to u first
        if not check(len(others) >= 2 and len(near - set(others[:2])) >= 1,
                     f"enough units for two merge groups ({len(ids)} units, {len(near)} similar to {uid})"):
            return
        a, b = others[0], others[1]
        tick(driver, a)
        tick(driver, b)
        btn = driver.find_element(By.ID, "merge-btn")
        check(btn.is_enabled() and "(2)" in btn.text, f"merge button enabled with two ticks ('{btn.text}')")
        btn.click()
        merge_col = driver.execute_script(
            "return Array.from(document.querySelectorAll('#units tbody tr[data-u]')).filter(r => r.children[3].textContent "
            "=== '1').map(r => Number(r.children[1].textContent))")
        check(sorted(merge_col) == sorted([a, b]), f"units {a} and {b} form merge group 1 ({merge_col})")
        click_row(driver, uid)
        mb = [e for e in driver.find_elements(By.CSS_SELECTOR, "#ccgs button[data-merge]")
              if ids[int(e.get_attribute("data-merge"))] not in (a, b)]
        v = int(mb[0].get_attribute("data-merge"))
        mb[0].click()
        groups = driver.execute_script("return bsReport.state.groups")
        want_groups = [sorted([a, b]), sorted([uid, ids[v]])]
        got = [sorted(ids[x] for x in g) for g in groups]
        check(sorted(got) == sorted(want_groups), f"merge groups {got}, expected {want_groups}")
        driver.find_element(By.ID, "undo").click()
        check(len(driver.execute_script("return bsReport.state.groups")) == 1, "undo takes the second merge back")
        driver.find_element(By.ID, "redo").click()
        check(len(driver.execute_script("return bsReport.state.groups")) == 2, "redo merges again")

        # filter and sort
        f = driver.find_element(By.ID, "filter")
        f.send_keys("label=noise")
        check(row_ids(driver) == [uid], "filter 'label=noise' leaves the relabelled unit only")
        f.clear()
        f.send_keys("noise")  # a bare word matches any text column: the label or the unit type
        ut = next((c["values"] for c in data["columns"] if c["key"] == "unit_type"), [""] * len(ids))
        want = sorted(set([uid] + [ids[x] for x in range(len(ids)) if ut[x] == "noise"]))
        check(sorted(row_ids(driver)) == want, f"filter 'noise' leaves the units labelled or typed noise ({want})")
        f.clear()
        f.send_keys("n_spikes>=%d" % n_spikes[u])
        want = sorted(ids[x] for x in range(len(ids)) if n_spikes[x] >= n_spikes[u])
        check(sorted(row_ids(driver)) == want, f"filter n_spikes>={n_spikes[u]} leaves {want}")
        f.send_keys(Keys.CONTROL, "a")
        f.send_keys(Keys.DELETE)
        driver.execute_script("const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'))")
        th = driver.find_element(By.CSS_SELECTOR, "#units th[data-key=n_spikes]")
        th.click()
        r = row_ids(driver)
        check([n_spikes[ids.index(i)] for i in r] == sorted(n_spikes), "n_spikes header sorts ascending")
        th.click()
        r = row_ids(driver)
        check([n_spikes[ids.index(i)] for i in r] == sorted(n_spikes, reverse=True), "second click sorts descending")

        # export
        driver.find_element(By.ID, "export-json").click()
        driver.find_element(By.ID, "export-tsv").click()
        jpath, tpath = os.path.join(dl, "curation.json"), os.path.join(dl, "cluster_group.tsv")
        if check(wait_file(jpath), "curation.json downloaded"):
            cur = json.load(open(jpath))
            check(cur.get("format_version") == "2", "format_version is \"2\"")
            check(cur.get("unit_ids") == ids, "unit_ids are the folder's cluster ids")
            ld = cur.get("label_definitions", {}).get("quality", {})
            check(ld.get("label_options") == ["good", "mua", "noise"] and ld.get("exclusive") is True,
                  "label_definitions.quality: good/mua/noise, exclusive")
            ml = {m["unit_id"]: m["labels"]["quality"] for m in cur.get("manual_labels", [])}
            check(ml.get(uid) == ["noise"] and ml.get(nxt) == ["mua"], f"manual labels of {uid} and {nxt}")
            expect = {ids[x]: [initial[x]] for x in range(len(ids)) if initial[x] != "unsorted"}
            expect[uid], expect[nxt] = ["noise"], ["mua"]
            check(ml == expect, "every other unit keeps the label of cluster_group.tsv")
            merges = cur.get("merges", [])
            check(sorted(m["unit_ids"] for m in merges) == sorted(want_groups),
                  f"merges {[m['unit_ids'] for m in merges]}")
            check(sorted(m["new_unit_id"] for m in merges) == [max(ids) + 1, max(ids) + 2],
                  "new unit ids are max id + 1, + 2")
            flat = [i for m in merges for i in m["unit_ids"]]
            check(len(flat) == len(set(flat)) and set(flat) <= set(ids), "merge groups are disjoint, ids known")
            check(cur.get("removed") == [] and cur.get("splits") == [], "no removals, no splits")
        if check(wait_file(tpath), "cluster_group.tsv downloaded"):
            lines = open(tpath).read().splitlines()
            check(lines[0] == "cluster_id\tgroup", "cluster_group.tsv header")
            rows = dict(tuple(l.split("\t")) for l in lines[1:])
            want = {str(ids[x]): initial[x] for x in range(len(ids))}
            want[str(uid)], want[str(nxt)] = "noise", "mua"
            check(rows == want and [l.split("\t")[0] for l in lines[1:]] == [str(i) for i in ids],
                  "cluster_group.tsv: a row per unit in ascending id with the current labels")

        # the curation survives a reload (local storage)
        driver.refresh()
        wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready after reload")
        check(row_label(driver, uid) == "noise" and len(driver.execute_script("return bsReport.state.groups")) == 2,
              "labels and merge groups survive a reload")

        # each tab has its address: opening the page at #run shows the run summary; a tab click sets the hash
        driver.get("file://" + os.path.abspath(args.html) + "#run")
        wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready at #run")
        active = driver.find_element(By.CSS_SELECTOR, "#tabs button.active").get_attribute("data-tab")
        check(active == "run" and driver.find_element(By.ID, "tab-run").is_displayed(), f"#run opens the run tab ({active})")
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=units]").click()
        check(driver.execute_script("return location.hash") == "#units", "a tab click sets the hash")
        check("Ctrl+Z" in driver.find_element(By.ID, "keys").text, "the page lists its keys")

        # the other tabs
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=drift]").click()
        check(ink(driver, "c-drift") > 0.02, f"drift map drawn ({ink(driver, 'c-drift'):.3f})")
        if data.get("motion"):
            check(ink(driver, "c-motion") > 0.005, "motion drawn")
        shot(driver, shots, "report-drift.png")
        # the traces view: stretches of the preprocessed recording, spikes in their unit's colour; a click on a spike
        # selects its unit
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=traces]").click()
        if data.get("traces"):
            tr = data["traces"]
            check(ink(driver, "c-traces") > 0.05, f"traces drawn ({ink(driver, 'c-traces'):.3f})")
            btns = driver.find_elements(By.CSS_SELECTOR, "#trace-stretches button")
            check(len(btns) == tr["n"], f"a button per stretch ({len(btns)})")
            btns[-1].click()
            check(driver.execute_script("return bsReport.trv.stretch") == tr["n"] - 1, "a stretch button shows that stretch")
            hits = driver.execute_script("return bsReport.trv.hits")
            other = next((h for h in hits if h["v"] != driver.execute_script("return bsReport.state.selected")), None)
            if check(other is not None, f"spikes of other units are drawn ({len(hits)} marks)"):
                cv = driver.find_element(By.ID, "c-traces")
                w, h = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height]", cv)
                ActionChains(driver).move_to_element_with_offset(cv, int(other["x"] - w / 2), int(other["y"] - h / 2)).click().perform()
                check(driver.execute_script("return bsReport.state.selected") == other["v"],
                      f"clicking a spike selects its unit ({ids[other['v']]})")
                check(f"unit {ids[other['v']]}" in driver.find_element(By.ID, "trace-note").text, "the note names it")
            shot(driver, shots, "report-traces.png")
        else:
            check(ink(driver, "c-traces") < 0.05, "no traces in the page: the view says so")
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=run]").click()
        if data.get("run"):
            n_rows = len(driver.find_elements(By.CSS_SELECTOR, "#run-table tbody tr"))
            check(n_rows == len(data["run"]["stages"]), f"run table has a row per stage ({n_rows})")
            check(ink(driver, "c-stage-mem") > 0.01 and ink(driver, "c-stage-time") > 0.01, "stage charts drawn")
        if data.get("mem"):
            check(ink(driver, "c-mem") > 0.02, "memory timeline drawn")
        shot(driver, shots, "report-run.png")
        driver.execute_script("document.getElementById('c-mem').scrollIntoView({block: 'end'})")
        shot(driver, shots, "report-memory.png")
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=curation]").click()
        check("group 1" in driver.find_element(By.ID, "cur-groups").text, "curation tab lists the merge groups")

        # merge proposals: accept one, reject the other, undo, redo, reload; the export holds the accepted merge
        props = data.get("merge_proposals", [])
        if len(props) >= 2:
            status = lambda i: driver.execute_script(f"return bsReport.proposalStatus({i})")
            driver.execute_script("window.confirm = () => true")
            driver.find_element(By.ID, "reset-curation").click()
            rows = driver.find_elements(By.CSS_SELECTOR, "#cur-proposals tr[data-prop]")
            check(len(rows) == len(props) and status(0) == "open" and status(1) == "open",
                  f"{len(rows)} proposals listed, open after a reset")
            driver.find_element(By.CSS_SELECTOR, "#cur-proposals button[data-accept='0']").click()
            a, b = ids[props[0]["a"]], ids[props[0]["b"]]
            merges = driver.execute_script("return bsReport.curationJSON().merges")
            check(status(0) == "accepted" and [m["unit_ids"] for m in merges] == [sorted([a, b])],
                  f"accepting proposal 0 merges units {a} and {b}")
            driver.find_element(By.CSS_SELECTOR, "#cur-proposals button[data-reject='1']").click()
            check(status(1) == "rejected", "rejecting proposal 1")
            driver.find_element(By.ID, "undo").click()
            check(status(1) == "open" and status(0) == "accepted", "undo reopens proposal 1, keeps proposal 0")
            driver.find_element(By.ID, "redo").click()
            check(status(1) == "rejected", "redo rejects proposal 1 again")
            driver.refresh()
            wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready after reload")
            check(status(0) == "accepted" and status(1) == "rejected", "proposal decisions survive a reload")
            driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=curation]").click()

        # split: a box dragged on a unit's amplitude plot, s; undo, redo, reload; the export holds it
        if data["spikes"].get("all"):
            merged = {x for g in driver.execute_script("return bsReport.state.groups") for x in g}
            su = next(x for x in cand if x not in merged)
            driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=units]").click()
            click_row(driver, ids[su])
            cv = driver.find_element(By.ID, "c-amp")
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cv)
            # the box: the whole time axis, amplitudes from the unit's median up
            g = driver.execute_script(
                "const c = arguments[0], f = c._bsFrame, u = bsReport.state.selected, a = bsReport.data.spikes.all; "
                "const r = c.getBoundingClientRect(); return [r.width, r.height, f.px, f.py, f.pw, f.ph]", cv)
            med = driver.execute_script(
                "const c = arguments[0], f = c._bsFrame, s = []; const d = bsReport.unitAmplitudes(bsReport.state.selected); "
                "const v = Array.from(d).filter(Number.isFinite).sort((a, b) => a - b); return f.Y(v[Math.floor(v.length / 2)])", cv)
            w, h, px, py, pw, ph = g
            ActionChains(driver).move_to_element_with_offset(cv, int(px + 2 - w / 2), int(py + 2 - h / 2)).click_and_hold() \
                .move_by_offset(int(pw - 4), int(med - py - 2)).release().perform()
            pend = driver.execute_script("return bsReport.state.pending")
            check(pend is not None and pend["u"] == su, f"dragging on unit {ids[su]}'s amplitude plot draws a box ({pend})")
            driver.find_element(By.TAG_NAME, "body").send_keys("s")
            part = driver.execute_script(f"return bsReport.splitIndices({su})")
            n_su = n_spikes[su]
            check(part is not None and 0 < len(part) < n_su, f"key s splits unit {ids[su]}: {len(part or [])} of {n_su} spikes")
            sp = driver.execute_script("return bsReport.curationJSON().splits")
            nid = max(ids) + 1 + len(driver.execute_script("return bsReport.state.groups"))
            check(sp == [{"unit_id": ids[su], "mode": "indices", "indices": [part], "new_unit_ids": [nid, nid + 1]}],
                  f"the export's split: unit {ids[su]}, its box's spike indices, new ids {nid}, {nid + 1}")
            check(ink(driver, "c-amp") > 0.01 and "split:" in driver.find_element(By.ID, "amp-note").text,
                  "the amplitude plot shows the split")
            shot(driver, shots, "report-split.png")
            driver.find_element(By.ID, "undo").click()
            check(driver.execute_script("return bsReport.curationJSON().splits") == [], "undo takes the split back")
            driver.find_element(By.ID, "redo").click()
            check(driver.execute_script("return bsReport.curationJSON().splits") == sp, "redo splits again")
            driver.refresh()
            wait_for(lambda: driver.execute_script("return window.bsReady === true"), 30, "page ready after reload")
            check(driver.execute_script("return bsReport.curationJSON().splits") == sp, "the split survives a reload")
            # a split unit is not merged
            other = next(x for x in cand if x not in merged and x != su)
            driver.execute_script(f"bsReport.mergeUnits([{su}, {other}])")
            check(driver.execute_script(f"return bsReport.state.groups.some(g => g.includes({su}))") is False
                  and driver.find_element(By.ID, "notice").is_displayed()
                  and "unsplit it before merging" in driver.find_element(By.ID, "notice").text,
                  "a split unit cannot be merged: the page says so")
            os.remove(jpath)
            driver.find_element(By.ID, "export-json").click()
            if check(wait_file(jpath), "curation.json with the split downloaded"):
                cur = json.load(open(jpath))
                n_groups = len(driver.execute_script("return bsReport.state.groups"))
                check(cur["splits"] == sp and len(cur["merges"]) == n_groups, "the file holds the merges and the split")
                shutil.copy(jpath, os.path.join(args.outdir, "curation-final.json"))
            driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=curation]").click()
        shot(driver, shots, "report-curation.png")
        check(not console_errors(driver), f"no console errors at the end: {console_errors(driver)}")
    finally:
        driver.quit()


def scale(args):
    data, html = load_report(args.html)
    dl = os.path.join(args.outdir, "downloads")
    os.makedirs(dl, exist_ok=True)
    driver = start(dl)
    try:
        t0 = time.time()
        driver.get("file://" + os.path.abspath(args.html))
        ok = wait_for(lambda: driver.execute_script("return window.bsReady === true"), args.max_load_s * 3, "page ready")
        load_s = time.time() - t0
        nav = driver.execute_script("const n = performance.getEntriesByType('navigation')[0]; return n ? "
                                    "n.domContentLoadedEventEnd : null")
        script_ms = driver.execute_script("return window.bsTiming && window.bsTiming.script_ms")
        print(f"page: {len(html) / 1e6:.2f} MB, {data['n_units']} units, {data['n_spikes']} spikes; ready "
              f"{load_s:.2f} s after the request (DOMContentLoaded at {nav:.0f} ms, script {script_ms:.0f} ms)")
        check(ok and load_s <= args.max_load_s, f"page ready within {args.max_load_s} s ({load_s:.2f} s)")
        check(not console_errors(driver), f"no console errors: {console_errors(driver)}")
        n_rows = driver.execute_script("return bsReport.order().length")
        n_dom = driver.execute_script("return document.querySelectorAll('#units tbody tr[data-u]').length")
        check(n_rows == data["n_units"] and 0 < n_dom < 200, f"table lists {n_rows} units, {n_dom} rows in the DOM")
        last = driver.execute_script("const w = document.querySelector('.table-wrap'); w.scrollTop = w.scrollHeight; "
                                     "w.dispatchEvent(new Event('scroll')); return new Promise(r => requestAnimationFrame(() => "
                                     "requestAnimationFrame(() => { const rows = document.querySelectorAll('#units tbody tr[data-u]'); "
                                     "r(Number(rows[rows.length - 1].children[1].textContent)); })))")
        check(last == data["n_units"] - 1, f"scrolled to the end, the last row is unit {last}")
        t1 = time.time()
        driver.execute_script("bsReport.select(bsReport.data.n_units - 1)")
        sel_ms = (time.time() - t1) * 1000
        print(f"selecting a unit (template, correlograms, scatter plots) took {sel_ms:.0f} ms")
        check(sel_ms < 2000, f"selecting a unit takes under 2 s ({sel_ms:.0f} ms)")
        t1 = time.time()
        driver.find_element(By.CSS_SELECTOR, "#units th[data-key=fr_hz]").click()
        sort_ms = (time.time() - t1) * 1000
        check(sort_ms < 2000, f"sorting 1,000 rows takes under 2 s ({sort_ms:.0f} ms)")
        t1 = time.time()
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=drift]").click()
        drift_ms = (time.time() - t1) * 1000
        check(drift_ms < 3000 and ink(driver, "c-drift") > 0.02, f"drift map drawn in {drift_ms:.0f} ms")
        driver.save_screenshot(os.path.join(args.outdir, "report-scale-drift.png"))
    finally:
        driver.quit()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["curate", "scale"])
    ap.add_argument("html")
    ap.add_argument("outdir")
    ap.add_argument("--screenshots")
    ap.add_argument("--max-load-s", type=float, default=10.0)
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    try:
        (curate if args.mode == "curate" else scale)(args)
    except Exception as e:  # a crash of the driver or the page is a failure, reported as one
        import traceback
        traceback.print_exc()
        check(False, f"unexpected {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
