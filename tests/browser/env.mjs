// What the browser tests are given (tests/CMakeLists.txt sets the variables): the baton binary, the
// source tree, Debian's chromium, and where screenshots go.
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

export const batonBin = process.env.BATON_BIN;
export const sourceDir = path.resolve(process.env.BATON_SOURCE_DIR ?? path.join(here, "..", ".."));
export const chromiumBin = process.env.BATON_CHROMIUM ?? "/usr/bin/chromium";
export const screenshotDir = path.resolve(
  process.env.BATON_SCREENSHOT_DIR ?? path.join(path.dirname(batonBin ?? "."), ".."),
);
