// The zod schemas of what an Agent takes back from its caller: a saved AgentState (checked
// before a run resumes it) and the input that resumes a paused run (an answer or tool results).
import { z } from 'zod';
import { ChatMessagesSchema } from '../chat/types.js';

export const AgentStateSchema = z.object({
  version: z.literal(1),
  conversationId: z.string().min(1),
  messages: ChatMessagesSchema,
  status: z.enum(['ready', 'completed', 'awaiting_user', 'awaiting_tools', 'halted', 'max_turns', 'halt_when', 'length']),
  turns: z.number().int().min(0),
  pending: z.array(
    z.object({
      id: z.string(),
      name: z.string(),
      arguments: z.union([z.record(z.string(), z.unknown()), z.string()]),
      reason: z.enum(['ask_user', 'manual', 'halt']),
      question: z.string().optional(),
      options: z.record(z.string(), z.unknown()).optional(),
      haltReason: z.string().optional(),
      haltResult: z.unknown().optional(),
    }),
  ),
  held: z.array(z.object({ toolCallId: z.string(), name: z.string(), content: z.string(), isError: z.boolean() })),
  spans: z.record(
    z.string(),
    z.object({
      text: z.string(),
      tokens: z.array(z.number().int().min(0)),
      prelude: z.object({ text: z.string(), tokens: z.array(z.number().int().min(0)) }).optional(),
    }),
  ),
  halt: z.unknown().optional(),
});

export const ResumeSchema = z.union([
  z.object({ answer: z.string() }).strict(),
  z.object({ results: z.record(z.string(), z.union([z.string(), z.object({ content: z.string(), isError: z.boolean().optional() }).strict()])) }).strict(),
]);
