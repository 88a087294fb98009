// Node 18 (Debian 12's) has no global `crypto` (Node 19 and later have it), and LangGraph's ids
// call crypto.getRandomValues: Node's own Web Crypto takes its place. Imported before @langchain/*.
import { webcrypto } from "node:crypto";

globalThis.crypto ??= webcrypto;
