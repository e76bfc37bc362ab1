// The chat page's entry: React renders <App> into #app (index.html is just the shell).
import './zod-jitless.js'; // first: before any module that uses zod is evaluated
import './styles.css';

import { createRoot } from 'react-dom/client';

import { App } from './App.jsx';

createRoot(document.getElementById('app')).render(<App />);
