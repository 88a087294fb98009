// An MCP server on the official SDK, whose tools fail in the ways a client must survive: a slow
// call cancelled, a crash mid-call, a line of stdout that is not JSON, a large result, a tool
// error, the tool list changing under the client, and a destructive tool. The tool "whoami"
// answers "stdio" or "http": the transport the call came through.
//
//   node tests/mcp/failing_server.mjs
//
// serves over stdio (the default).
//
// With FAILING_SERVER_NO_INIT=1 it reads stdin and never answers anything (not even initialize).
//
// With FAILING_SERVER_HTTP_PORT=PORT (0: any free port) it serves Streamable HTTP instead, on
// http://127.0.0.1:PORT/mcp only (bound to 127.0.0.1, never all interfaces), stateful: an
// initialize POST without an mcp-session-id opens a session (its own transport and server);
// POST, GET (the SSE stream) and DELETE with a known mcp-session-id go to that session; an
// unknown session id is 404, a POST without one that is not initialize is 400, a body that is
// not JSON is 400. Once listening it prints one line to stdout, "listening on
// http://127.0.0.1:PORT/mcp" with the real port. With FAILING_SERVER_TOKEN=TOKEN as well, every
// request must carry "Authorization: Bearer TOKEN", else 401 {"error":"unauthorized"}. SIGTERM
// closes the sessions and the listener and exits 0. The tools "malformed" and "hostile" still
// write to stdout over HTTP, where it means nothing to the client.

import process from 'node:process';

if (process.env.FAILING_SERVER_NO_INIT === '1') {
  // No SDK: keep stdin open, drain it, answer nothing. Exits when stdin closes.
  process.stdin.on('data', () => {});
  process.stdin.resume();
} else if (process.env.FAILING_SERVER_HTTP_PORT !== undefined) {
  await serveHttp(process.env.FAILING_SERVER_HTTP_PORT, process.env.FAILING_SERVER_TOKEN);
} else {
  await serveStdio();
}

async function serveStdio() {
  const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
  const server = await makeServer('stdio');
  await server.connect(new StdioServerTransport());
}

async function serveHttp(portText, token) {
  const http = await import('node:http');
  const { randomUUID } = await import('node:crypto');
  const { StreamableHTTPServerTransport } = await import('@modelcontextprotocol/sdk/server/streamableHttp.js');
  const { isInitializeRequest } = await import('@modelcontextprotocol/sdk/types.js');

  const port = Number(portText);
  if (portText.trim() === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`FAILING_SERVER_HTTP_PORT is not a port: ${JSON.stringify(portText)}\n`);
    process.exit(2);
  }

  const sessions = new Map();  // mcp-session-id -> { transport, server }

  const json = (res, status, body) => {
    if (res.headersSent) return;
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const rpcError = (res, status, code, message) =>
    json(res, status, { jsonrpc: '2.0', error: { code, message }, id: null });

  const readBody = (req) => new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });

  const handle = async (req, res) => {
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      json(res, 401, { error: 'unauthorized' });
      return;
    }
    if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') {
      json(res, 404, { error: 'not found' });
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    const session = sessionId ? sessions.get(sessionId) : undefined;

    if (req.method === 'POST') {
      let body;
      try {
        body = JSON.parse(await readBody(req));
      } catch {
        rpcError(res, 400, -32700, 'Parse error: the body is not JSON');
        return;
      }
      if (session) {
        await session.transport.handleRequest(req, res, body);
      } else if (sessionId) {
        rpcError(res, 404, -32001, 'Session not found');
      } else if (isInitializeRequest(body)) {
        const server = await makeServer('http');
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => { sessions.set(sid, { transport, server }); },
        });
        transport.onclose = () => {
          const sid = transport.sessionId;
          if (sid) sessions.delete(sid);
        };
        await server.connect(transport);
        await transport.handleRequest(req, res, body);
      } else {
        rpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
      }
    } else if (req.method === 'GET' || req.method === 'DELETE') {
      if (!sessionId) {
        rpcError(res, 400, -32000, 'Bad Request: Missing session ID');
      } else if (!session) {
        rpcError(res, 404, -32001, 'Session not found');
      } else {
        await session.transport.handleRequest(req, res);
      }
    } else {
      res.setHeader('Allow', 'GET, POST, DELETE');
      rpcError(res, 405, -32000, 'Method not allowed');
    }
  };

  const httpServer = http.createServer((req, res) => {
    handle(req, res).catch((error) => {
      process.stderr.write(`error handling ${req.method} ${req.url}: ${error?.stack ?? error}\n`);
      rpcError(res, 500, -32603, 'Internal server error');
    });
  });

  let stopping = false;
  process.on('SIGTERM', async () => {
    if (stopping) return;
    stopping = true;
    httpServer.close();
    for (const { server } of [...sessions.values()]) {
      try { await server.close(); } catch { /* closing anyway */ }
    }
    sessions.clear();
    httpServer.closeAllConnections();  // the GET streams and keep-alive sockets
    process.exit(0);
  });

  await new Promise((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(port, '127.0.0.1', resolve);
  });
  process.stdout.write(`listening on http://127.0.0.1:${httpServer.address().port}/mcp\n`);
}

// A new McpServer with every tool; transportName is what "whoami" answers ("stdio" or "http").
async function makeServer(transportName) {
  const { McpServer } = await import('@modelcontextprotocol/sdk/server/mcp.js');
  const { z } = await import('zod');

  const text = (s) => ({ content: [{ type: 'text', text: s }] });
  const server = new McpServer({ name: 'baton-failing-server', version: '1.0.0' });
  let added = null;

  server.registerTool('echo', {
    description: 'Echoes its text.',
    inputSchema: { text: z.string() },
    annotations: { readOnlyHint: true },
  }, async ({ text: t }) => text(t));

  server.registerTool('pick', {
    description: 'Answers "COLOR LOUD NOTE".',
    inputSchema: {
      color: z.enum(['red', 'green', 'blue']),
      loud: z.boolean(),
      note: z.string(),
    },
  }, async ({ color, loud, note }) => text(`${color} ${loud} ${note}`));

  server.registerTool('slow', {
    description: 'Waits ms milliseconds, then answers "done"; stops when cancelled.',
    inputSchema: { ms: z.number() },
  }, ({ ms }, extra) => new Promise((resolve, reject) => {
    const { signal } = extra;
    const cancelled = () => {
      clearTimeout(timer);
      process.stderr.write('cancelled\n');
      reject(new Error('cancelled')); // the SDK sends nothing for an aborted request
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', cancelled);
      resolve(text('done'));
    }, ms);
    if (signal.aborted) cancelled();
    else signal.addEventListener('abort', cancelled, { once: true });
  }));

  server.registerTool('crash', {
    description: 'Exits the process with status 3.',
    inputSchema: {},
  }, async () => process.exit(3));

  server.registerTool('malformed', {
    description: 'Writes a line that is not JSON to stdout, then answers normally.',
    inputSchema: {},
  }, async () => {
    await new Promise((resolve) => process.stdout.write('{not json\n', resolve));
    return text('malformed sent');
  });

  server.registerTool('big', {
    description: 'Answers a text of bytes "x" characters.',
    inputSchema: { bytes: z.number().int().nonnegative() },
  }, async ({ bytes }) => text('x'.repeat(bytes)));

  server.registerTool('fail', {
    description: 'Answers a tool error.',
    inputSchema: {},
  }, async () => ({ isError: true, content: [{ type: 'text', text: 'it failed' }] }));

  server.registerTool('add_tool', {
    description: 'Registers the tool "added"; the server sends notifications/tools/list_changed.',
    inputSchema: {},
  }, async () => {
    // registerTool on a connected McpServer sends notifications/tools/list_changed itself;
    // a second call only sends the notification again.
    if (!added) {
      added = server.registerTool('added', {
        description: 'Answers "added".',
        inputSchema: {},
      }, async () => text('added'));
    } else {
      server.sendToolListChanged();
    }
    return text('tool added');
  });

  server.registerTool('hostile', {
    description: 'Answers its own call by hand with values of the wrong types, after a line nested 100,000 deep.',
    inputSchema: {},
  }, async (_args, extra) => {
    const line = (s) => new Promise((resolve) => process.stdout.write(s + '\n', resolve));
    await line('['.repeat(100000) + ']'.repeat(100000));
    await line(JSON.stringify({ jsonrpc: '2.0', id: extra.requestId,
      result: { content: 'not a list', isError: 'yes', structuredContent: 7 } }));
    return text('too late: the call was answered');  // its id is no longer open in the client
  });

  server.registerTool('delete_all', {
    description: 'Pretends to delete everything.',
    inputSchema: {},
    annotations: { destructiveHint: true },
  }, async () => text('deleted'));

  server.registerTool('whoami', {
    description: 'Answers the transport this server is reached through: "stdio" or "http".',
    inputSchema: {},
    annotations: { readOnlyHint: true },
  }, async () => text(transportName));

  return server;
}
