// An MCP server on the official SDK with the tools the official conformance suite's server
// scenarios call (@modelcontextprotocol/conformance, "Server Implementation Requirements" of
// each scenario), by the names and with the results they check. conformance_test.mjs puts it
// behind baton (registry prefix ""), so that the suite, testing baton's /mcp, finds them there.
//
//   node tests/mcp/conformance_server.mjs
//
// serves over stdio. test_tool_with_progress and test_tool_with_logging send their
// notifications to baton, which does not pass them on to its client; test_reconnection only
// answers (in the suite's own server it closes the event stream mid-call: here baton is the
// peer that streams). There are no sampling or elicitation tools: baton does not relay a
// server's requests to its client.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

// A 1x1 red PNG (RGB, 8 bits) and a WAV of 8 silent samples (8 kHz, mono, 16 bits).
const RED_PIXEL_PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC';
const SILENT_WAV = 'UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA';

const JSON_SCHEMA_2020_12 = 'https://json-schema.org/draft/2020-12/schema';

const text = (s) => ({ content: [{ type: 'text', text: s }] });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// logging: test_tool_with_logging sends notifications/message, which the SDK sends only when the
// server declares it.
const server = new McpServer(
  { name: 'baton-conformance-server', version: '1.0.0' },
  { capabilities: { logging: {} } },
);

server.registerTool('test_simple_text', {
  description: 'Answers a simple text.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => text('This is a simple text response for testing.'));

server.registerTool('test_image_content', {
  description: 'Answers a 1x1 red PNG image.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => ({ content: [{ type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' }] }));

server.registerTool('test_audio_content', {
  description: 'Answers a short silent WAV.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => ({ content: [{ type: 'audio', data: SILENT_WAV, mimeType: 'audio/wav' }] }));

server.registerTool('test_embedded_resource', {
  description: 'Answers an embedded text resource.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => ({
  content: [{
    type: 'resource',
    resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
  }],
}));

server.registerTool('test_multiple_content_types', {
  description: 'Answers a text, an image and an embedded resource.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => ({
  content: [
    { type: 'text', text: 'Multiple content types test:' },
    { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' },
    {
      type: 'resource',
      resource: {
        uri: 'test://mixed-content-resource',
        mimeType: 'application/json',
        text: JSON.stringify({ test: 'data', value: 123 }),
      },
    },
  ],
}));

server.registerTool('test_error_handling', {
  description: 'Always fails: answers a tool error.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => {
  // McpServer answers a thrown error as {isError: true, content: [{type: "text", text: message}]}.
  throw new Error('This tool intentionally returns an error for testing');
});

server.registerTool('test_tool_with_progress', {
  description: 'Reports progress 0, 50 and 100 of 100, 50 ms apart, when the call has a progress token.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async (_args, extra) => {
  const token = extra._meta?.progressToken;
  for (const progress of [0, 50, 100]) {
    if (progress > 0) await sleep(50);
    if (token !== undefined) {
      await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
    }
  }
  return text('Progress tool completed');
});

server.registerTool('test_tool_with_logging', {
  description: 'Sends three info log messages, 50 ms apart, while it runs.',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async (_args, extra) => {
  const messages = ['Tool execution started', 'Tool processing data', 'Tool execution completed'];
  for (const [i, data] of messages.entries()) {
    if (i > 0) await sleep(50);
    await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
  }
  return text('Logging tool completed');
});

server.registerTool('test_reconnection', {
  description: 'Answers a text (the suite\'s SSE polling scenario calls it).',
  inputSchema: {},
  annotations: { readOnlyHint: true },
}, async () => text('Reconnection test completed'));

// The json-schema-2020-12 scenario checks that $schema, $defs and additionalProperties reach the
// client as the server lists them. The SDK converts zod to draft-07 (definitions, not $defs), so
// the root's metadata sets $schema and $defs, and address's metadata makes it the bare $ref (its
// type and properties, undefined, are dropped when the list is written as JSON); zod still checks
// the same shape on a call.
server.registerTool('json_schema_2020_12_tool', {
  description: 'Tool with JSON Schema 2020-12 features',
  inputSchema: z.strictObject({
    name: z.string().optional(),
    address: z.object({ street: z.string().optional(), city: z.string().optional() }).optional()
      .meta({ $ref: '#/$defs/address', type: undefined, properties: undefined }),
  }).meta({
    $schema: JSON_SCHEMA_2020_12,
    $defs: {
      address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
    },
  }),
  annotations: { readOnlyHint: true },
}, async ({ name, address }) => text(`name=${name ?? ''} street=${address?.street ?? ''} city=${address?.city ?? ''}`));

await server.connect(new StdioServerTransport());
