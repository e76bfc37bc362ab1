import './globals.css';

export const metadata = { title: 'durable-harness × Next.js' };

/** The root layout: nothing but the page. */
export default function RootLayout({ children }) {
  return (
    <html lang="en">
      <body>{children}</body>
    </html>
  );
}
