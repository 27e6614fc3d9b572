// Opens a report of mt's (scripts/plot-runs --html) in headless Chromium from
// file:// and checks it as a reader would see it: no console error, page error or failed
// request; every panel drew (a canvas with coloured pixels) and its legend
// names the runs (by directory); the page's own figures (window.mtReport) printed as a JSON line.
//   node check_report.mjs PAGE.html NAMES_JSON [SCREENSHOT.png]
// NAMES_JSON: the runs' names (their directories), in order. Exit 0: passed; 1: a check failed (named).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.MT_NODE_MODULES + "/");
const { chromium } = require("playwright-core");
const [page_path, names_json, shot] = process.argv.slice(2);
const names = JSON.parse(names_json);
const problems = [];

const browser = await chromium.launch({
  executablePath: process.env.MT_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  page.on("console", m => { if (m.type() === "error") problems.push("console error: " + m.text()); });
  page.on("pageerror", e => problems.push("page error: " + e.message));
  page.on("requestfailed", r => problems.push("failed request: " + r.url()));
  page.on("request", r => { if (!r.url().startsWith("file:")) problems.push("network request: " + r.url()); });
  await page.goto(pathToFileURL(page_path).href);
  await page.waitForFunction(() => window.mtReport && (window.mtReport.ready || window.mtReport.errors.length),
                             null, { timeout: 20000 });
  const r = await page.evaluate(() => {
    const canvases = [...document.querySelectorAll(".panel canvas")];
    /* a canvas drew something when some pixel is coloured (axes and text are grey) */
    const blank = canvases.filter(c => {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      for (let i = 0; i < d.length; i += 4)
        if (d[i + 3] > 128 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 40)
          return false;
      return true;
    }).map(c => c.closest(".panel").id);
    return { ...window.mtReport, canvases: canvases.length, blank };
  });
  problems.push(...r.errors.map(e => "report error: " + e));
  for (const p of r.panels) {
    if (!p.drawn) problems.push(`panel ${p.id} drew nothing`);
    if (p.kind === "chart" && !(p.xlabel && p.ylabel)) problems.push(`panel ${p.id}: no axis labels`);
    const strangers = p.id === "rate" ? [] : p.legend.filter(l => !names.includes(l));
    if (strangers.length) problems.push(`panel ${p.id}: legend ${JSON.stringify(strangers)} not a run's name`);
  }
  if (JSON.stringify(r.runs) !== JSON.stringify(names))
    problems.push(`runs ${JSON.stringify(r.runs)}, expected ${JSON.stringify(names)}`);
  for (const id of r.blank) problems.push(`${id}: a blank canvas`);
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify({ loadMs: Math.round(r.loadMs), panels: r.panels.map(p => p.id),
                               canvases: r.canvases, notes: r.notes, live: r.live }));
} finally {
  await browser.close();
}
for (const p of problems) console.log("FAIL " + p);
process.exit(problems.length ? 1 : 0);
