// An MCP server over stdio, on the official SDK, whose tools fail in the ways a client must
// survive: a slow call cancelled, a crash mid-call, a line of stdout that is not JSON, a large
// result, a tool error, the tool list changing under the client, and a destructive tool.
//
//   node tests/mcp/failing_server.mjs
//
// With FAILING_SERVER_NO_INIT=1 it reads stdin and never answers anything (not even initialize).

import process from 'node:process';

if (process.env.FAILING_SERVER_NO_INIT === '1') {
  // No SDK: keep stdin open, drain it, answer nothing. Exits when stdin closes.
  process.stdin.on('data', () => {});
  process.stdin.resume();
} else {
  await serve();
}

async function serve() {
  const { McpServer } = await import('@modelcontextprotocol/sdk/server/mcp.js');
  const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
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

  await server.connect(new StdioServerTransport());
}
