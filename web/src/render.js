// Rendering UIMessages into the DOM, keyed by message id and part index: only parts whose
// content changed are touched, and a streaming text part just gets its text node updated.

const TOOL_STATES = {
  'input-streaming': 'Preparing input',
  'input-available': 'Running',
  'approval-requested': 'Waiting for approval',
  'approval-responded': 'Answered',
  'output-available': 'Done',
  'output-error': 'Error',
  'output-denied': 'Denied',
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
}

function json(value) {
  if (value === undefined) return '';
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function isToolPart(part) {
  return part.type === 'dynamic-tool' || part.type.startsWith('tool-');
}

export function toolName(part) {
  return part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
}

function renderText(part) {
  const node = el('div', 'part part--text');
  node.dataset.part = 'text';
  node.append(document.createTextNode(part.text));
  return node;
}

function renderReasoning(part) {
  const node = el('div', 'part part--reasoning');
  node.dataset.part = 'reasoning';
  node.append(el('span', 'part__label', 'Reasoning'));
  const body = el('p', 'reasoning__text');
  body.append(document.createTextNode(part.text));
  node.append(body);
  return node;
}

function codeBlock(label, value, className = '') {
  const wrap = el('div', `tool-card__section ${className}`.trim());
  wrap.append(el('div', 'tool-card__label', label));
  wrap.append(el('pre', 'tool-card__code', value));
  return wrap;
}

function renderTool(part, { onApproval }) {
  const name = toolName(part);
  const card = el('section', 'part tool-card');
  card.dataset.part = 'tool';
  card.dataset.tool = name;
  card.dataset.state = part.state;
  card.setAttribute('aria-label', `Tool call ${name}: ${TOOL_STATES[part.state] ?? part.state}`);

  const header = el('header', 'tool-card__header');
  header.append(el('span', 'tool-card__icon', '⚙'));
  header.lastChild.setAttribute('aria-hidden', 'true');
  header.append(el('code', 'tool-card__name', name));
  const badge = el('span', `badge badge--${part.state}`, TOOL_STATES[part.state] ?? part.state);
  badge.dataset.testid = 'tool-state';
  header.append(badge);
  card.append(header);

  if (part.input !== undefined) card.append(codeBlock('Input', json(part.input), 'tool-card__input'));
  else if (part.rawInput !== undefined) card.append(codeBlock('Input', String(part.rawInput), 'tool-card__input'));

  if (part.state === 'output-available') {
    card.append(codeBlock(part.preliminary ? 'Output (preliminary)' : 'Output', json(part.output), 'tool-card__output'));
  } else if (part.state === 'output-error') {
    const section = codeBlock('Error', part.errorText ?? 'The tool failed.', 'tool-card__error');
    section.setAttribute('role', 'note');
    card.append(section);
  } else if (part.state === 'output-denied') {
    card.append(el('p', 'tool-card__note', part.approval?.reason ? `Denied: ${part.approval.reason}` : 'You denied this call; it did not run.'));
  }

  if (part.state === 'approval-requested' && part.approval) {
    const actions = el('div', 'tool-card__actions');
    actions.setAttribute('role', 'group');
    actions.setAttribute('aria-label', `Approve or deny ${name}`);
    const prompt = el('p', 'tool-card__question', `Allow ${name} to run with this input?`);
    const approve = el('button', 'button button--primary', 'Approve');
    approve.type = 'button';
    approve.dataset.action = 'approve';
    approve.addEventListener('click', () => onApproval(part.approval.id, true, actions));
    const deny = el('button', 'button button--danger', 'Deny');
    deny.type = 'button';
    deny.dataset.action = 'deny';
    deny.addEventListener('click', () => onApproval(part.approval.id, false, actions));
    actions.append(prompt, approve, deny);
    card.append(actions);
  } else if (part.state === 'approval-responded' && part.approval) {
    card.append(el('p', 'tool-card__note', part.approval.approved ? 'Approved, running…' : 'Denied.'));
  }
  return card;
}

function renderFile(part) {
  const node = el('div', 'part part--file');
  node.dataset.part = 'file';
  node.textContent = `📎 ${part.filename ?? part.mediaType}`;
  return node;
}

function renderSource(part) {
  const node = el('div', 'part part--source');
  node.dataset.part = 'source';
  if (part.type === 'source-url') {
    const link = el('a', null, part.title ?? part.url);
    link.href = part.url;
    link.rel = 'noopener noreferrer';
    link.target = '_blank';
    node.append('Source: ', link);
  } else {
    node.textContent = `Source: ${part.title ?? part.filename ?? part.sourceId}`;
  }
  return node;
}

function renderPart(part, handlers) {
  if (part.type === 'text') return renderText(part);
  if (part.type === 'reasoning') return renderReasoning(part);
  if (isToolPart(part)) return renderTool(part, handlers);
  if (part.type === 'file') return renderFile(part);
  if (part.type === 'source-url' || part.type === 'source-document') return renderSource(part);
  return placeholder(part); // step-start, data-*, custom: nothing to show
}

function placeholder(part) {
  const node = el('span');
  node.hidden = true;
  node.dataset.hiddenPart = part.type;
  return node;
}

/** Update a rendered part in place when only its text grew (streaming); else false. */
function patchPart(node, previous, part) {
  if (previous.type !== part.type) return false;
  const target = part.type === 'text' ? node : part.type === 'reasoning' ? node.querySelector('.reasoning__text') : null;
  const textNode = target?.firstChild;
  if (textNode?.nodeType !== Node.TEXT_NODE || node.dataset.part !== part.type) return false;
  textNode.nodeValue = part.text;
  return true;
}

export class MessageList {
  constructor(root, handlers) {
    this.root = root;
    this.handlers = handlers;
    this.views = new Map(); // message id -> {node, body, parts: [{key, part, node}]}
  }

  render(messages, { streamingId } = {}) {
    const seen = new Set();
    let previous = null;
    for (const message of messages) {
      seen.add(message.id);
      let view = this.views.get(message.id);
      if (view == null) {
        view = this.#createView(message);
        this.views.set(message.id, view);
      }
      this.#renderParts(view, message);
      view.node.classList.toggle('message--streaming', message.id === streamingId);
      const expected = previous ? previous.nextSibling : this.root.firstChild;
      if (expected !== view.node) this.root.insertBefore(view.node, expected);
      previous = view.node;
    }
    for (const [id, view] of this.views) {
      if (!seen.has(id)) {
        view.node.remove();
        this.views.delete(id);
      }
    }
  }

  #createView(message) {
    const node = el('article', `message message--${message.role}`);
    node.dataset.role = message.role;
    node.dataset.messageId = message.id;
    const author = message.role === 'user' ? 'You' : message.role === 'assistant' ? 'Assistant' : 'System';
    node.setAttribute('aria-label', author);
    node.append(el('div', 'message__author', author));
    const body = el('div', 'message__body');
    node.append(body);
    return { node, body, parts: [] };
  }

  #renderParts(view, message) {
    const parts = message.parts ?? [];
    parts.forEach((part, index) => {
      const key = JSON.stringify(part);
      const current = view.parts[index];
      if (current && current.key === key) return;
      if (current && patchPart(current.node, current.part, part)) {
        view.parts[index] = { key, part, node: current.node };
        return;
      }
      const node = renderPart(part, this.handlers);
      if (current) current.node.replaceWith(node);
      else view.body.append(node);
      view.parts[index] = { key, part, node };
    });
    for (const stale of view.parts.splice(parts.length)) stale.node.remove();
  }
}
