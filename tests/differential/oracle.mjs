// Differential oracle: reads JSON lines {"prior","next"} or {"scenario"} on stdin and
// answers with what the real packages produce. Run by tests/differential, never shipped.
import { createRequire } from "node:module";
import readline from "node:readline";

const require = createRequire(process.env.WM_ORACLE_NODE_MODULES + "/");
const { structuredPatch } = require("diff");

function hunksOnly(prior, next) {
  const { hunks } = structuredPatch("", "", prior, next, "", "", { context: 0 });
  return hunks
    .map((h) =>
      [`@@ -${h.oldStart},${h.oldLines} +${h.newStart},${h.newLines} @@`,
       ...h.lines.filter((l) => !l.startsWith("\\ No newline at end of file"))].join("\n"))
    .join("\n");
}

async function loadProcessor() {
  const fs = await import("node:fs");
  const dir = process.env.WM_ORACLE_NODE_MODULES + "/@mastra/memory/dist";
  for (const name of fs.readdirSync(dir)) {
    if (!name.endsWith(".js")) continue;
    const text = fs.readFileSync(dir + "/" + name, "utf8");
    if (!text.includes("var WorkingMemoryStateProcessor = class")) continue;
    const mod = await import(dir + "/" + name);
    for (const value of Object.values(mod)) {
      if (typeof value === "function" && value.name === "WorkingMemoryStateProcessor") return value;
    }
  }
  throw new Error("WorkingMemoryStateProcessor not found");
}

// Mastra's runtime around the processor, for one lane: history of accepted signals and
// tracking; a re-injection with the same cacheKey and mode keeps the version.
async function runScenario(Processor, sc) {
  const out = [];
  const history = [];
  let tracking;
  for (let i = 0; i < sc.steps.length; i++) {
    const step = sc.steps[i];
    const format = step.format ?? sc.format;
    const scope = "scope" in step ? step.scope : sc.scope;
    const configured = !("template" in step && step.template === null);
    const memory = {
      getWorkingMemoryTemplate: async () => (configured ? { format, content: "# T" } : null),
      getWorkingMemory: async () => step.data,
      getMergedThreadConfig: () => ({ workingMemory: { scope: scope ?? undefined } }),
    };
    const p = new Processor(memory, {});
    let lastSnapshot, deltas = [];
    if (step.hasSnapshot) {
      const idx = history.findLastIndex((s) => s.mode === "snapshot");
      if (idx >= 0) { lastSnapshot = history[idx].sig; deltas = history.slice(idx + 1).filter((s) => s.mode === "delta").map((s) => s.sig); }
    }
    const r = await p.computeStateSignal({
      threadId: "t", resourceId: "r", contextWindow: { hasSnapshot: step.hasSnapshot },
      tracking, lastSnapshot, deltasSinceSnapshot: deltas,
    });
    if (!r) { out.push({ step: i, emitted: false, version: tracking?.version ?? null }); continue; }
    const same = tracking?.currentCacheKey === r.cacheKey && tracking?.currentMode === r.mode;
    const prev = tracking?.version ?? 0;
    const version = same ? (prev || 1) : prev + 1;
    tracking = { currentCacheKey: r.cacheKey, currentMode: r.mode, version };
    const meta = sc.history === "no-value" ? {} : { value: r.value };
    history.push({ mode: r.mode, sig: { contents: r.contents, metadata: meta } });
    out.push({ step: i, emitted: true, ...r, version });
  }
  return out;
}

const Processor = process.env.WM_ORACLE_MASTRA ? await loadProcessor() : null;
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  if (req.kind === "scenario") {
    process.stdout.write(JSON.stringify({ steps: await runScenario(Processor, req.scenario) }) + "\n");
  } else if (req.kind === "trim") {
    process.stdout.write(JSON.stringify({ trimmed: req.text.trim() }) + "\n");
  } else {
    process.stdout.write(JSON.stringify({ patch: hunksOnly(req.prior, req.next) }) + "\n");
  }
}
