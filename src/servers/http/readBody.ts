import type { IncomingMessage } from 'node:http';

/**
 * A request's body; `too large` when it is over maxBytes, `unreadable` when the client went away
 * mid-body. A body over the bound is never buffered: a declared Content-Length is refused at
 * once, a streamed one at the first chunk past the bound, and the rest is read and dropped so
 * that the answer can still reach the client.
 */
export function readBody(
  request: IncomingMessage,
  maxBytes: number,
): Promise<Buffer | 'too large' | 'unreadable'> {
  const declared = Number(request.headers['content-length'] ?? 0);
  if (declared > maxBytes) {
    request.resume();
    return Promise.resolve('too large');
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      if (size > maxBytes) return;
      size += chunk.length;
      if (size <= maxBytes) chunks.push(chunk);
      else {
        chunks.length = 0;
        resolve('too large');
      }
    });
    request.on('end', () => resolve(size > maxBytes ? 'too large' : Buffer.concat(chunks)));
    request.on('error', () => resolve('unreadable'));
  });
}
