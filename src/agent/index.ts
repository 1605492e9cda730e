/** The tool-calling agent loop. */
export { Agent, type AgentOptions, type AgentGenerateOptions, type AgentRunOptions } from './agent.js';
export type {
  AgentEvent,
  AgentHeldResult,
  AgentPendingCall,
  AgentResult,
  AgentResumeInput,
  AgentSpan,
  AgentState,
  AgentStatus,
  AgentToolCallInfo,
  AgentTurnInfo,
  AgentTurnReport,
} from './types.js';
