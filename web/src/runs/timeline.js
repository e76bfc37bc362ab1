// A run's timeline, derived from what the server records: the chunk log (steps, text, tool calls with
// their inputs and outputs, approval requests, denials, errors, `finish`), the run's status
// (`sliceTimes`: when each slice began; `chunkTimes`: when the timed chunks were written, both as
// [log index, epoch seconds]) and, once the run ended, its result (each step's token usage).

/** Entries in log order: {kind, index, at?, ...}; a step or tool call carries `durationMs` once known. */
export function buildTimeline(chunks, status, result) {
  const times = new Map((status?.chunkTimes ?? []).map(([index, at]) => [index, at]));
  const slices = [...(status?.sliceTimes ?? [])];
  const steps = result?.steps ?? [];
  const entries = [];
  const calls = new Map();
  let step = null;
  let stepNumber = 0;

  let sliceNumber = 0;
  const sliceStarts = (upTo) => { // a slice's first chunk is where it began
    while (slices.length && slices[0][0] <= upTo) {
      const [index, at] = slices.shift();
      sliceNumber += 1;
      entries.push({ kind: 'slice', index, at, number: sliceNumber });
    }
  };

  chunks.forEach((chunk, index) => {
    sliceStarts(index);
    const at = times.get(index);
    switch (chunk.type) {
      case 'start-step':
        stepNumber += 1;
        step = { kind: 'step', index, at, number: stepNumber, text: 0, reasoning: 0, usage: steps[stepNumber - 1]?.usage };
        entries.push(step);
        break;
      case 'finish-step':
        if (step) {
          step.endedAt = at;
          if (step.at != null && at != null) step.durationMs = Math.round((at - step.at) * 1000);
          step = null;
        }
        break;
      case 'text-delta':
        if (step) step.text += chunk.delta.length;
        break;
      case 'reasoning-delta':
        if (step) step.reasoning += chunk.delta.length;
        break;
      case 'tool-input-available': {
        const call = { kind: 'tool', index, at, toolCallId: chunk.toolCallId, toolName: chunk.toolName, input: chunk.input, state: 'running' };
        calls.set(chunk.toolCallId, call);
        entries.push(call);
        break;
      }
      case 'tool-output-available':
      case 'tool-output-error': {
        let call = calls.get(chunk.toolCallId);
        if (!call) { // a call approved in an earlier run: it ran in this one
          call = { kind: 'tool', index, toolCallId: chunk.toolCallId, toolName: '(approved in an earlier run)', state: 'running', approvedEarlier: true };
          calls.set(chunk.toolCallId, call);
          entries.push(call);
        }
        if (chunk.preliminary) break;
        call.state = chunk.type === 'tool-output-error' ? 'error' : 'done';
        call.output = chunk.output;
        call.errorText = chunk.errorText;
        call.endedAt = at;
        if (call.at != null && at != null) call.durationMs = Math.round((at - call.at) * 1000);
        break;
      }
      case 'tool-approval-request': {
        const call = calls.get(chunk.toolCallId);
        if (call) call.state = 'awaiting approval';
        entries.push({ kind: 'approval', index, at, approvalId: chunk.approvalId, toolCallId: chunk.toolCallId, toolName: call?.toolName });
        break;
      }
      case 'tool-output-denied': {
        const call = calls.get(chunk.toolCallId);
        if (call) call.state = 'denied';
        entries.push({ kind: 'denied', index, toolCallId: chunk.toolCallId, toolName: call?.toolName });
        break;
      }
      case 'error':
        entries.push({ kind: 'error', index, errorText: chunk.errorText });
        break;
      case 'abort':
        entries.push({ kind: 'abort', index, reason: chunk.reason });
        break;
      case 'finish':
        entries.push({ kind: 'finish', index, finishReason: chunk.finishReason });
        break;
      default:
        break;
    }
  });
  sliceStarts(Infinity);
  if (status && status.status.startsWith('awaiting_')) {
    entries.push({ kind: 'wait', index: chunks.length, status: status.status, pending: status.pendingApprovals ?? [] });
  }
  return entries;
}

/** "1.2 s", "340 ms". */
export function formatDuration(ms) {
  if (ms == null) return '';
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s` : `${ms} ms`;
}

/** A run's time as the reader's local time (the API sends ISO 8601 UTC, or epoch seconds). */
export function formatTime(value) {
  if (value == null) return '';
  const date = typeof value === 'number' ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}
