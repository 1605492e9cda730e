// Generates the scripted GGUF fixtures into an ignored folder before any test file runs.
export default async function setup(): Promise<void> {}
