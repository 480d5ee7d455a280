// Runs Python code from stdin under the WebAssembly MicroPython with firmware/lib on /lib (and, with
// --firmware, the firmware fakes and microdot too). Prints what the code prints. Used by bench/mpy.py.
import { loadMicroPython } from "@micropython/micropython-webassembly-pyscript";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const firmware = process.argv.includes("--firmware");

function copyTree(mp, src, dst) {
  try { mp.FS.mkdir(dst); } catch (e) { /* exists */ }
  for (const ent of fs.readdirSync(src, { withFileTypes: true })) {
    if (ent.name === "__pycache__" || ent.name.startsWith(".")) continue;
    const s = path.join(src, ent.name);
    if (ent.isDirectory()) copyTree(mp, s, dst + "/" + ent.name);
    else if (ent.name.endsWith(".py") || ent.name.endsWith(".json")) mp.FS.writeFile(dst + "/" + ent.name, fs.readFileSync(s));
  }
}

const mp = await loadMicroPython({
  heapsize: 8 * 1024 * 1024,
  stdout: (s) => process.stdout.write(s + "\n"),
  stderr: (s) => process.stderr.write(s + "\n"),
  linebuffer: true,
});
copyTree(mp, path.join(root, "firmware", "lib"), "/lib");
copyTree(mp, path.join(root, "tests", "vectors"), "/vectors");
if (firmware) {
  const fakes = path.join(root, "tests", "firmware", "fakes");
  if (fs.existsSync(fakes)) copyTree(mp, fakes, "/lib");
  const py = path.join(root, ".venv", "bin", "python");
  const md = execFileSync(py, ["-c", "import microdot, os; print(os.path.dirname(microdot.__file__))"]).toString().trim();
  copyTree(mp, md, "/lib/microdot");
  try { mp.FS.mkdir("/board"); } catch (e) { /* exists */ }
  for (const n of ["boot.py", "main.py"]) {
    const p = path.join(root, "firmware", n);
    if (fs.existsSync(p)) mp.FS.writeFile("/board/" + n, fs.readFileSync(p));
  }
}
const code = fs.readFileSync(0, "utf8");
try {
  await mp.runPythonAsync(code);
} catch (e) {
  process.stderr.write(String(e.message || e) + "\n");
  process.exit(1);
}
