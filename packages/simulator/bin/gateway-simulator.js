#!/usr/bin/env node
// The simulator is a development tool and ships as TypeScript source, run by tsx: no build step to forget.
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
