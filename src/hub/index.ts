// Models from a hub or a URL into a local folder: pull(), listModels(), removeModel().
export { pull, listModels, removeModel, findModel, modelsDirectory, DEFAULT_HF_ENDPOINT } from './pull.js';
export type { PullOptions, PullProgress, ModelsDirOptions } from './pull.js';
export type { PulledModel, PulledFile } from './manifest.js';
export { parseModelReference, DEFAULT_QUANTS } from './reference.js';
export type { ModelReference } from './reference.js';
export { HubError } from './errors.js';
export type { HubErrorDetails } from './errors.js';
