// An assistant's text as Markdown, rendered to React elements by markdown-to-jsx: no HTML string
// ever reaches the DOM. Raw HTML in the text is not parsed (it shows as the text it is), link
// URLs go through the library's sanitizer (no `javascript:` and the like), links open in a new
// tab without an opener, and images are shown as links: the page loads nothing the model names.
import Render from 'markdown-to-jsx';
import { memo } from 'react';

function Link({ href, title, children }) {
  return <a href={href} title={title} rel="noopener noreferrer nofollow" target="_blank">{children}</a>;
}

function Image({ src, alt, title }) {
  const label = alt || title || src || 'image';
  return src ? <Link href={src} title={title}>{`[image: ${label}]`}</Link> : `[image: ${label}]`;
}

const OPTIONS = {
  disableParsingRawHTML: true,
  forceWrapper: true,
  wrapper: 'div',
  overrides: { a: { component: Link }, img: { component: Image } },
};

/** `text` as Markdown; memoized, so a streaming reply re-parses only the part that changed. */
export const Markdown = memo(function Markdown({ text }) {
  return <Render options={OPTIONS}>{text}</Render>;
});
