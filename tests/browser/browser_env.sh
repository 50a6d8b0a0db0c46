# browser_env.sh - sourced by the report's browser tests: finds Debian's
# Chromium and chromedriver and a Python with Selenium (a venv made once per
# build folder, under a lock, with the system's numpy visible).
# bs_browser_setup: sets BS_CHROMIUM, BS_CHROMEDRIVER and BS_VPY; returns 77
# when Chromium is not installed (the test is then skipped), 1 when something
# else is missing or the venv cannot be made (a failure: deps.sh installs
# chromium and chromium-driver, PyPI serves selenium).
bs_browser_setup() {
  BS_CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
  if [ -z "$BS_CHROMIUM" ]; then
    echo "chromium is not installed (scripts/deps.sh installs it): browser test skipped"
    return 77
  fi
  BS_CHROMEDRIVER=$(command -v chromedriver || { [ -x /usr/lib/chromium/chromedriver ] && echo /usr/lib/chromium/chromedriver; } || true)
  if [ -z "$BS_CHROMEDRIVER" ]; then
    echo "chromium is installed but chromedriver is not (Debian package chromium-driver, see scripts/deps.sh)" >&2
    return 1
  fi
  local venv=${BS_BROWSER_VENV:-$(dirname "${BS_TMP:?}")/browser-venv}
  mkdir -p "$(dirname "$venv")"
  (
    flock 9
    if ! "$venv/bin/python" -c "import selenium" 2>/dev/null; then
      rm -rf "$venv"
      /usr/bin/python3 -m venv --system-site-packages "$venv" &&
        "$venv/bin/pip" install -q --disable-pip-version-check "selenium>=4.11,<5"
    fi
  ) 9>"$venv.lock" || { echo "could not make a Python venv with selenium in $venv" >&2; return 1; }
  BS_VPY=$venv/bin/python
  return 0
}
